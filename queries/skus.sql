-- skus.sql: every distinct (service, SKU) in the usage range with the attribution it gets.
--
-- The user's way to audit classification (`gpucost skus`): which rule matched, the category and
-- subcategory, the pricing model the SKU implies (rows whose CUD credits make them committed are
-- counted in `committed_rows`), how many export rows and how much gross / net cost it carries.
--
-- Params: @usage_start, @usage_end (TIMESTAMP), @partition_end (TIMESTAMP, upper bound of load
-- days; widened to at least 2 days past usage).
WITH export_rows AS (
  SELECT
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    transaction_type,
    CAST(ROUND(IFNULL(cost, 0) * 1000000) AS INT64) AS gross_micros,
    IFNULL((
      SELECT SUM(CAST(ROUND(c.amount * 1000000) AS INT64)) FROM UNNEST(credits) AS c
    ), 0) AS credit_micros,
    IFNULL((
      SELECT SUM(CAST(ROUND(c.amount * 1000000) AS INT64))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_CUD_CREDIT(c)
    ), 0) AS cud_micros
  FROM billing_export
  WHERE
    _PARTITIONTIME >= TIMESTAMP_SUB(TIMESTAMP_TRUNC(@usage_start, DAY), INTERVAL 1 DAY)
    AND _PARTITIONTIME < GREATEST(
      @partition_end, TIMESTAMP_ADD(TIMESTAMP_TRUNC(@usage_end, DAY), INTERVAL 3 DAY)
    )
    AND usage_start_time >= @usage_start
    AND usage_start_time < @usage_end
),
ruled AS (
  SELECT e.*, GPUCOST_RULE() AS rule FROM export_rows AS e
),
attributed AS (
  SELECT
    r.*,
    GPUCOST_SUBCATEGORY(r.rule) AS subcategory,
    CASE
      WHEN STARTS_WITH(GPUCOST_SUBCATEGORY(r.rule), 'compute.')
        THEN IFNULL(GPUCOST_SKU_PRICING_MODEL(r.rule), 'on_demand')
    END AS pricing_model
  FROM ruled AS r
)
SELECT
  service_id,
  service_description,
  sku_id,
  sku_description,
  rule,
  subcategory,
  pricing_model,
  COUNT(*) AS row_count,
  COUNTIF(cud_micros <> 0) AS committed_rows,
  SUM(gross_micros) AS gross_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM attributed
GROUP BY service_id, service_description, sku_id, sku_description, rule, subcategory, pricing_model
ORDER BY service_description, sku_description, sku_id, rule
