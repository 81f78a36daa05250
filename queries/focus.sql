-- focus.sql: attributed cost per usage day at the grain of a FOCUS 1.x cost row.
--
-- One row per day, billing account, project, service, SKU, location, resource, cost type and
-- label set, with list / gross / credit / net micros, so monitor/focus.py can write FOCUS columns
-- (ListCost, ContractedCost, BilledCost, EffectiveCost, ...) without reading raw export rows.
--
-- Money is integer micros in the export's own currency (GPUCOST_MICROS), as the invoice shows it.
--
-- Params: @usage_start, @usage_end (TIMESTAMP), @partition_end (TIMESTAMP, upper bound of load
-- days; widened to at least 2 days past usage).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
WITH export_rows AS (
  SELECT
    TIMESTAMP_TRUNC(usage_start_time, DAY) AS usage_day,
    billing_account_id,
    invoice.month AS invoice_month,
    project.id AS project_id,
    project.name AS project_name,
    location.region AS region,
    location.zone AS zone,
    resource.name AS resource_name,
    resource.global_name AS resource_global_name,
    (
      SELECT STRING_AGG(CONCAT(l.key, '=', l.value), ',' ORDER BY l.key)
      FROM UNNEST(labels) AS l
    ) AS label_set,
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    transaction_type,
    currency,
    -- quantities as NUMERIC (9 decimals; DECIMAL(38, 9) on DuckDB, monitor.sql.bigquery_numeric):
    -- an exact sum, the same on both engines and every run; FLOAT64 sums depend on the order the rows are added in, and the
    -- FOCUS quantities of one export differed in their last digits between BigQuery and DuckDB
    CAST(usage.amount AS NUMERIC) AS usage_amount,
    usage.unit AS usage_unit,
    CAST(usage.amount_in_pricing_units AS NUMERIC) AS pricing_amount,
    usage.pricing_unit AS pricing_unit,
    GPUCOST_MICROS(IFNULL(cost, 0)) AS gross_micros,
    GPUCOST_MICROS(IFNULL(cost_at_list, IFNULL(cost, 0))) AS list_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount)) FROM UNNEST(credits) AS c
    ), 0) AS credit_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_CUD_CREDIT(c)
    ), 0) AS cud_micros,
    -- the commitment behind the row's CUD credits, one credit whole (FOCUS CommitmentDiscountId,
    -- Type, Name): "id|type|full_name" of the credit with the lowest id, split by monitor/focus.py
    -- (ids are resource paths, without "|"); a row covered by two commitments names the first.
    -- Older exports have no credits.id, and then FOCUS wants no commitment columns at all.
    (
      SELECT MIN(CONCAT(c.id, '|', IFNULL(c.type, ''), '|', IFNULL(c.full_name, '')))
      FROM UNNEST(credits) AS c
      WHERE (GPUCOST_CUD_CREDIT(c)) AND c.id IS NOT NULL
    ) AS cud_credit
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
)
SELECT
  usage_day,
  billing_account_id,
  invoice_month,
  project_id,
  project_name,
  region,
  zone,
  resource_name,
  resource_global_name,
  label_set,
  service_id,
  service_description,
  sku_id,
  sku_description,
  subcategory,
  pricing_model,
  cost_type,
  currency,
  usage_unit,
  pricing_unit,
  cud_credit,
  COUNT(*) AS row_count,
  SUM(usage_amount) AS usage_amount,
  SUM(pricing_amount) AS pricing_amount,
  SUM(list_micros) AS list_micros,
  SUM(gross_micros) AS gross_micros,
  SUM(cud_micros) AS cud_micros,
  SUM(credit_micros) AS credit_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM attributed
GROUP BY
  usage_day, billing_account_id, invoice_month, project_id, project_name, region, zone,
  resource_name, resource_global_name, label_set, service_id, service_description, sku_id,
  sku_description, subcategory, pricing_model, cost_type, currency, usage_unit, pricing_unit,
  cud_credit
-- every grouping key, so both engines write the rows in one order (ties, such as a usage row and
-- its correction, came out swapped between BigQuery and DuckDB)
ORDER BY
  usage_day, project_id, service_description, sku_description, resource_name, cost_type, zone, region,
  label_set, resource_global_name, billing_account_id, invoice_month, project_name, service_id, sku_id,
  subcategory, pricing_model, currency, usage_unit, pricing_unit, cud_credit
