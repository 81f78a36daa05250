-- hourly.sql: attributed cost per usage hour, at the grain the state store keeps.
--
-- Gross cost, credits by type (CUD, SUD, other) and net, as integer micros of USD summed in the
-- engine: GPUCOST_USD_MICROS divides amounts by `currency_conversion_rate` (the export's cost / rate =
-- USD), so a billing account in another currency yields the USD figures the detectors speak in.
-- Every row is attributed by the compiled rules (GPUCOST_RULE() and friends are slots filled with
-- SQL CASE expressions built from the rules, see monitor/attribution/compile.py) and keyed by
-- project, region, zone, resource (instance) name and numeric id, GKE cluster / node pool /
-- namespace and the configured user labels.
--
-- Params: @usage_start, @usage_end (TIMESTAMP, usage hours to aggregate), @partition_end (TIMESTAMP,
-- upper bound of load days; widened to at least 2 days past usage), @label_keys (ARRAY<STRING>).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
WITH export_rows AS (
  SELECT
    TIMESTAMP_TRUNC(usage_start_time, HOUR) AS usage_hour,
    invoice.month AS invoice_month,
    project.id AS project_id,
    location.region AS region,
    location.zone AS zone,
    resource.name AS resource_name,
    NULLIF(REGEXP_EXTRACT(resource.global_name, r'/instances/([^/]+)$'), '') AS instance_id,
    (
      SELECT MAX(l.value) FROM UNNEST(system_labels) AS l
      WHERE l.key = 'compute.googleapis.com/machine_spec'
    ) AS machine_type,
    (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = 'goog-k8s-cluster-name') AS cluster,
    (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = 'goog-k8s-node-pool-name') AS node_pool,
    (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = 'k8s-namespace') AS namespace,
    (
      SELECT STRING_AGG(CONCAT(l.key, '=', l.value), ',' ORDER BY l.key)
      FROM UNNEST(labels) AS l
      WHERE l.key IN UNNEST(@label_keys)
    ) AS user_labels,
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    transaction_type,
    currency,
    usage.amount_in_pricing_units AS usage_amount,
    usage.pricing_unit AS pricing_unit,
    GPUCOST_USD_MICROS(IFNULL(cost, 0)) AS gross_micros,
    IFNULL((
      SELECT SUM(GPUCOST_USD_MICROS(c.amount))
      FROM UNNEST(credits) AS c
    ), 0) AS credit_micros,
    IFNULL((
      SELECT SUM(GPUCOST_USD_MICROS(c.amount))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_CUD_CREDIT(c)
    ), 0) AS cud_micros,
    IFNULL((
      SELECT SUM(GPUCOST_USD_MICROS(c.amount))
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
    GPUCOST_PRICING_MODEL(r.rule, r.cud_micros) AS pricing_model,
    -- The grain detectors need: per resource (VM / GKE node, its pool and namespace) only for GPU
    -- time, paid traffic between zones and regions (the egress detector names the VMs) and cluster
    -- / Vertex AI fees, and per Filestore share by its name alone (idle_orchestration judges each
    -- share; summed, a project's shares were one unnamed finding); CPU, RAM, disks, buckets,
    -- internet egress, ingress, free intra-zone traffic and the rest sum per project, zone, machine
    -- type, cluster, labels and SKU, so fewer rows leave the engine (per-VM internet and intra-zone
    -- rows were a third of the aggregates at bench scale 48).
    GPUCOST_SUBCATEGORY(r.rule) IN ('compute.gpu', 'network.inter_zone', 'network.inter_region')
      OR STARTS_WITH(GPUCOST_SUBCATEGORY(r.rule), 'orchestration.') AS detailed
  FROM ruled AS r
),
shaped AS (
  SELECT
    a.* EXCEPT (resource_name, instance_id, node_pool, namespace),
    IF(a.detailed OR a.subcategory = 'storage.filestore', a.resource_name, NULL) AS resource_name,
    IF(a.detailed, a.instance_id, NULL) AS instance_id,
    IF(a.detailed, a.node_pool, NULL) AS node_pool,
    IF(a.detailed, a.namespace, NULL) AS namespace
  FROM attributed AS a
)
SELECT
  usage_hour,
  invoice_month,
  project_id,
  region,
  zone,
  resource_name,
  instance_id,
  machine_type,
  cluster,
  node_pool,
  namespace,
  user_labels,
  service_id,
  service_description,
  sku_id,
  sku_description,
  subcategory,
  pricing_model,
  cost_type,
  currency,
  pricing_unit,
  COUNT(*) AS row_count,
  SUM(usage_amount) AS usage_amount,
  SUM(gross_micros) AS gross_micros,
  SUM(cud_micros) AS cud_micros,
  SUM(sud_micros) AS sud_micros,
  SUM(credit_micros - cud_micros - sud_micros) AS other_credit_micros,
  SUM(credit_micros) AS credit_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM shaped
GROUP BY
  usage_hour, invoice_month, project_id, region, zone, resource_name, instance_id, machine_type, cluster,
  node_pool, namespace, user_labels, service_id, service_description, sku_id, sku_description,
  subcategory, pricing_model, cost_type, currency, pricing_unit
-- No ORDER BY: the rows go into the aggregate store, whose readers sort what they read. Sorting a
-- first poll's millions of aggregates cost DuckDB 4.7 s and 0.5 GB of 27 s and 2.6 GB at 7.4 M export
-- rows (bench scale 48), and a large ORDER BY is what BigQuery runs on a single worker.
