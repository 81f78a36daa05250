-- changed_hours.sql: the usage hours that the rows loaded into one partition since the last poll touch.
--
-- A poll re-aggregates only these hours (with hourly.sql), so a late correction for one old hour
-- costs one hour's aggregation, not everything from that hour to now. The export only appends: a
-- partition's new rows are those exported after its stored watermark (@since_export; for a
-- partition first seen in this poll, the epoch: every row is new). Reads one partition and two
-- cheap columns, never cost data; returns one row per hour. Every new row counts, whatever its usage
-- time (partitions.sql counts a partition's rows so): the poll checks the count against what the
-- partition gained, and keeps the hours in its scope.
--
-- Params: @partition_time (TIMESTAMP, the partition's day), @since_export (TIMESTAMP).
SELECT
  TIMESTAMP_TRUNC(usage_start_time, HOUR) AS usage_hour,
  COUNT(*) AS row_count
FROM billing_export
WHERE
  _PARTITIONTIME >= @partition_time
  AND _PARTITIONTIME < TIMESTAMP_ADD(@partition_time, INTERVAL 1 DAY)
  AND export_time > @since_export
GROUP BY usage_hour
ORDER BY usage_hour
