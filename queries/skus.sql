-- skus.sql: every distinct (service, SKU) in the usage range with the attribution it gets.
--
-- The user's way to audit classification (`gpucost skus`): which rule matched, the category and
-- subcategory, the pricing model the SKU implies (rows whose CUD credits make them committed are
-- counted in `committed_rows`), how many export rows and how much gross / net cost it carries.
--
-- Money is integer micros in the export's own currency (GPUCOST_MICROS), as the invoice shows it,
-- grouped by that currency: a SKU billed to two accounts invoiced in different currencies is two
-- lines, never euros added to dollars (as report.sql).
--
-- Params: @usage_start, @usage_end (TIMESTAMP), @partition_end (TIMESTAMP, upper bound of load
-- days; widened to at least 2 days past usage).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
WITH export_rows AS (
  SELECT
    service.id AS service_id,
    service.description AS service_description,
    sku.id AS sku_id,
    sku.description AS sku_description,
    IFNULL(cost_type, 'regular') AS cost_type,
    transaction_type,
    currency,
    GPUCOST_MICROS(IFNULL(cost, 0)) AS gross_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount)) FROM UNNEST(credits) AS c
    ), 0) AS credit_micros,
    IFNULL((
      SELECT SUM(GPUCOST_MICROS(c.amount))
      FROM UNNEST(credits) AS c
      WHERE GPUCOST_CUD_CREDIT(c)
    ), 0) AS cud_micros
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
  currency,
  COUNT(*) AS row_count,
  COUNTIF(cud_micros <> 0) AS committed_rows,
  SUM(gross_micros) AS gross_micros,
  SUM(gross_micros + credit_micros) AS net_micros
FROM attributed
GROUP BY service_id, service_description, sku_id, sku_description, rule, subcategory, pricing_model, currency
ORDER BY service_description, sku_description, sku_id, rule, currency, service_id, subcategory, pricing_model
