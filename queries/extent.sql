-- extent.sql: the usage range present in the export (default report window: up to the latest
-- usage_end_time, or past the latest usage_start_time when a row ends before it starts), with the
-- row count and latest load time.
--
-- Params: @usage_start, @usage_end (TIMESTAMP, the range to look in), @partition_end (TIMESTAMP,
-- upper bound of load days; widened to at least 2 days past usage).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
SELECT
  MIN(usage_start_time) AS min_usage_start,
  MAX(usage_start_time) AS max_usage_start,
  MAX(usage_end_time) AS max_usage_end,
  MAX(export_time) AS max_export_time,
  COUNT(*) AS row_count
FROM billing_export
WHERE
  GPUCOST_USAGE_WINDOW()
