-- report.sql: attributed gross / credits / net per usage day and one grouping key.
--
-- @group_by picks the key: category (the `category.subcategory`, with the compute pricing model),
-- project, region, zone, instance (resource.name), service, sku, cluster, or label (the value of
-- user label @label_key). Days let the caller mark the provisional ones.
--
-- Money is integer micros in the export's own currency (GPUCOST_MICROS), as the invoice shows it,
-- grouped by that currency: an export holding billing accounts invoiced in two currencies (a view
-- over several accounts' tables) is never summed across them.
--
-- Params: @usage_start, @usage_end (TIMESTAMP), @partition_end (TIMESTAMP, upper bound of load
-- days; widened to at least 2 days past usage), @group_by (STRING), @label_key (STRING).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
WITH export_rows AS (
  SELECT
    TIMESTAMP_TRUNC(usage_start_time, DAY) AS usage_day,
    project.id AS project_id,
    location.region AS region,
    location.zone AS zone,
    resource.name AS resource_name,
    (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = 'goog-k8s-cluster-name') AS cluster,
    (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = @label_key) AS label_value,
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    currency,
    transaction_type,
    GPUCOST_MICROS(IFNULL(cost, 0)) AS gross_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount)) FROM UNNEST(credits) AS c
    ), 0) AS credit_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_CUD_CREDIT(c)
    ), 0) AS cud_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_SUD_CREDIT(c)
    ), 0) AS sud_micros
  FROM billing_export
  WHERE
    GPUCOST_USAGE_WINDOW()
),
ruled AS (
  SELECT e.*, GPUCOST_RULE() AS rule FROM export_rows AS e
),
attributed AS (
  SELECT
    r.*,
    GPUCOST_SUBCATEGORY(r.rule) AS subcategory,
    GPUCOST_PRICING_MODEL(r.rule, r.cud_micros) AS pricing_model
  FROM ruled AS r
),
keyed AS (
  SELECT
    a.usage_day,
    a.currency,
    a.gross_micros,
    a.credit_micros,
    a.cud_micros,
    a.sud_micros,
    CASE @group_by
      WHEN 'category' THEN a.subcategory
      WHEN 'project' THEN a.project_id
      WHEN 'region' THEN a.region
      WHEN 'zone' THEN a.zone
      WHEN 'instance' THEN a.resource_name
      WHEN 'service' THEN a.service_description
      WHEN 'sku' THEN a.sku_description
      WHEN 'cluster' THEN a.cluster
      WHEN 'label' THEN a.label_value
    END AS group_key,
    IF(@group_by = 'category', a.pricing_model, NULL) AS group_pricing_model
  FROM attributed AS a
)
SELECT
  usage_day,
  group_key,
  group_pricing_model AS pricing_model,
  currency,
  COUNT(*) AS row_count,
  SUM(gross_micros) AS gross_micros,
  SUM(cud_micros) AS cud_micros,
  SUM(sud_micros) AS sud_micros,
  SUM(credit_micros - cud_micros - sud_micros) AS other_credit_micros,
  SUM(credit_micros) AS credit_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM keyed
GROUP BY usage_day, group_key, group_pricing_model, currency
ORDER BY usage_day, group_key, group_pricing_model, currency
