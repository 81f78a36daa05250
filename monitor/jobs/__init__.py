"""Training jobs as the unit: what each job cost, where its money went, what it wasted.

- `config`: `[jobs]` (`JobsConfig`): which labels name a job.
- `identity`: a row's job from its labels (`job_of`, `parse_labels`).
- `build`: per-job records from `queries/jobs.sql` rows and the joined GPU hours (`build_jobs`,
  `JobRecord`, `JobHour`, `JobSpend`, `job_spend`, `cents_summing_to`): pure.
- `run`: the window's analysis and `jobs.sql` on one billing source (`jobs_once`, `run_jobs`,
  `jobs_report`, `jobs_params`, `JobsReport`).
- `held`: the labelled spend the aggregate store holds before a detection run's read start
  (`held_spend`), summed in the engine: a job budget counts the job's life.

Only the light modules are imported here: `monitor.config` imports `JobsConfig` from this package,
so importing `build` / `run` (which import the pipeline, and through it `monitor.config`) at package
import would be circular. Import those from their modules.
"""

from monitor.jobs.config import JobsConfig
from monitor.jobs.identity import job_of, parse_labels

__all__ = ["JobsConfig", "job_of", "parse_labels"]
