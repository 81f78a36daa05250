-- project_ids.sql: the project id of each project number with usage in the window.
--
-- The Cloud Billing Budget API names a budget's projects by number (`projects/123456789`); the
-- aggregates keep project ids. The export's `project` record carries both, so it maps one to the
-- other (monitor.cycle: a budget of one project is forecast against that project's spend). One row
-- per project number and id (an id never changes once its project exists), with its row count.
-- Reads three short columns (`project.number`, `project.id`, `usage_start_time`), never cost data;
-- rows without a project (taxes, some account-level charges) have no number and are left out.
--
-- Params: @usage_start, @usage_end (TIMESTAMP, the usage range to look in), @partition_end
-- (TIMESTAMP, upper bound of load days; widened to at least 2 days past usage).
-- The usage and load-day filter is the GPUCOST_USAGE_WINDOW() slot (monitor/attribution/compile.py).
SELECT
  project.number AS project_number,
  project.id AS project_id,
  COUNT(*) AS row_count
FROM billing_export
WHERE
  GPUCOST_USAGE_WINDOW()
  AND project.number IS NOT NULL
GROUP BY project_number, project_id
ORDER BY project_number, project_id
