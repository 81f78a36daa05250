-- jobs.sql: every dollar of the window per training job, hour, resource and subcategory.
--
-- A row's job is named by its labels whose keys are in @job_label_keys (the `[jobs]` keys, GKE cost
-- allocation's `k8s-label/<pod label>` among them), returned as `job_labels` ("k=v,k=v", sorted by
-- key, the same form as hourly.sql's `user_labels`); monitor/jobs/identity.py picks the job from them.
-- Rows without any such label keep `job_labels` NULL, so the jobs and the unlabelled rest add up to
-- the export. One exception, resolved here in the engine: a persistent disk without job labels
-- takes the job of the labelled VM of the same name in its project and zone: a VM's new boot disk
-- is named after the VM by default (Compute Engine API, AttachedDisk.initializeParams.diskName:
-- "If not specified, the default is to use the name of the instance"). This only fills in for
-- disks nobody labelled; a disk named otherwise stays with `job: null`.
--
-- Money is integer micros of USD (GPUCOST_USD_MICROS), credits split like hourly.sql,
-- and every row is attributed by the same compiled rules (GPUCOST_* slots, see
-- monitor/attribution/compile.py), so a job's subcategories are the ones `gpucost analyze` shows.
-- Resource, instance id, node pool, machine type and SKU are kept where the jobs engine reads them:
-- GPU rows (the GPU join), compute rows of a cluster node (node-hours for cluster fees) and
-- orchestration rows (each fee row split on its own). Any other compute row names its resource
-- only in the resource's first hour under the row's job labels (what lists a job's instances) and
-- is summed with the job's other rows otherwise; the rest, network rows included (the engine reads
-- their money alone), sums per project, zone, cluster, job and subcategory. At bench scale 48:
-- 1,654,462 rows with every compute and network row's resource, 1,415,333 without the network
-- rows', 836,707 without the others'.
--
-- Params: @usage_start, @usage_end (TIMESTAMP), @partition_end (TIMESTAMP, upper bound of load
-- days; widened to at least 2 days past usage), @job_label_keys (ARRAY<STRING>).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
WITH export_rows AS (
  SELECT
    TIMESTAMP_TRUNC(usage_start_time, HOUR) AS usage_hour,
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
    (
      SELECT STRING_AGG(CONCAT(l.key, '=', l.value), ',' ORDER BY l.key)
      FROM UNNEST(labels) AS l
      WHERE l.key IN UNNEST(@job_label_keys)
    ) AS job_labels,
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    transaction_type,
    usage.amount_in_pricing_units AS usage_amount,
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
    GPUCOST_PRICING_MODEL(r.rule, r.cud_micros) AS pricing_model
  FROM ruled AS r
),
joined AS (
  -- a disk without job labels takes the job of the labelled VM (a row with an instance id) of its
  -- name in its project and zone, as of the disk's hour: the VM's latest labelled hour at or before
  -- it (its own hour's VM rows first; two instances of the name in one hour: the higher id, whatever
  -- order the rows come in), else its first one after (a disk billed before its VM's first labelled
  -- row). The highest label over the window gave a VM name reused by a second job the
  -- first job's disk hours too. Windows over the rows, no second pass
  SELECT
    a.* EXCEPT (job_labels),
    IFNULL(
      a.job_labels,
      IF(
        a.subcategory = 'storage.persistent_disk',
        IFNULL(
          LAST_VALUE(IF(a.instance_id IS NOT NULL, a.job_labels, NULL) IGNORE NULLS) OVER (
            PARTITION BY a.project_id, a.zone, a.resource_name
            ORDER BY a.usage_hour, a.instance_id IS NULL, a.instance_id, a.job_labels
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
          ),
          FIRST_VALUE(IF(a.instance_id IS NOT NULL, a.job_labels, NULL) IGNORE NULLS) OVER (
            PARTITION BY a.project_id, a.zone, a.resource_name
            ORDER BY a.usage_hour, a.instance_id IS NULL, a.instance_id, a.job_labels
            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING
          )
        ),
        NULL
      )
    ) AS job_labels,
    a.subcategory = 'compute.gpu'
      OR (STARTS_WITH(a.subcategory, 'compute.') AND a.cluster IS NOT NULL)
      OR STARTS_WITH(a.subcategory, 'orchestration.') AS detailed
  FROM attributed AS a
),
named AS (
  -- whether a compute row is its resource's first under its job labels (where a row not kept
  -- whole still names its resource)
  SELECT
    j.*,
    STARTS_WITH(j.subcategory, 'compute.') AND j.usage_hour = MIN(j.usage_hour) OVER (
      PARTITION BY j.job_labels, j.project_id, j.zone, j.resource_name
    ) AS first_of_job
  FROM joined AS j
),
shaped AS (
  SELECT
    n.* EXCEPT (resource_name, instance_id, node_pool, machine_type, sku_description),
    IF(n.detailed OR n.first_of_job, n.resource_name, NULL) AS resource_name,
    IF(n.detailed, n.instance_id, NULL) AS instance_id,
    IF(n.detailed, n.node_pool, NULL) AS node_pool,
    IF(n.detailed, n.machine_type, NULL) AS machine_type,
    IF(n.detailed AND STARTS_WITH(n.subcategory, 'compute.'), n.sku_description, NULL) AS sku_description
  FROM named AS n
)
SELECT
  usage_hour,
  job_labels,
  project_id,
  region,
  zone,
  cluster,
  resource_name,
  instance_id,
  node_pool,
  machine_type,
  sku_description,
  subcategory,
  pricing_model,
  COUNT(*) AS row_count,
  SUM(usage_amount) AS usage_amount,
  SUM(gross_micros) AS gross_micros,
  SUM(cud_micros) AS cud_micros,
  SUM(sud_micros) AS sud_micros,
  SUM(credit_micros) AS credit_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM shaped
GROUP BY
  usage_hour, job_labels, project_id, region, zone, cluster, resource_name, instance_id, node_pool,
  machine_type, sku_description, subcategory, pricing_model
-- every grouping column: a total order, so the rows come in the same order from either engine and
-- every run (the engine sums a job's node-hour shares and splits a fee's micros in row order)
ORDER BY
  usage_hour, job_labels, project_id, subcategory, region, zone, cluster, resource_name, instance_id,
  node_pool, machine_type, sku_description, pricing_model
