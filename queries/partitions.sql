-- partitions.sql: the load watermark of every ingestion-time partition in the polled scope.
--
-- One row per `_PARTITIONTIME` day: the latest `export_time` loaded into it, its row count, and the
-- usage hours its rows cover. The poll compares these with the stored watermarks and re-aggregates
-- only the usage hours of partitions that changed. Reads three cheap columns, never cost data.
-- Every row of a partition counts, whatever its usage time: a mark then changes only when rows are
-- loaded, not when the scope's start moves past some of them (with the usage filter, the partition
-- at the scope's trailing edge "lost" rows each day and was re-aggregated whole). BigQuery bills the
-- partitions and columns read, so dropping the usage filter costs nothing.
--
-- Params: @usage_start, @usage_end (TIMESTAMP, the usage range in scope), @partition_end
-- (TIMESTAMP, upper bound of the load days to look at; widened to at least 2 days past usage).
-- The load-day filter is the GPUCOST_LOAD_DAYS() slot (monitor/attribution/compile.py).
SELECT
  _PARTITIONTIME AS partition_time,
  MAX(export_time) AS max_export_time,
  COUNT(*) AS row_count,
  MIN(TIMESTAMP_TRUNC(usage_start_time, HOUR)) AS min_usage_hour,
  MAX(TIMESTAMP_TRUNC(usage_start_time, HOUR)) AS max_usage_hour
FROM billing_export
WHERE
  GPUCOST_LOAD_DAYS()
GROUP BY partition_time
ORDER BY partition_time
