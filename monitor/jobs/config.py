"""`[jobs]`: which labels name a training job, and when a job counts as still running.

A job is named by the VALUE of the first label key present on a billing row, keys tried in this
order: `labels` (plain resource labels, e.g. `job` on a VM, its disks, its buckets), then
`k8s_labels` (Kubernetes pod labels, which GKE cost allocation writes into the export's `labels`
as `k8s-label/<pod label key>`), then `vertex_labels` (labels Vertex AI puts on the resources of a
run). First-present wins, rather than the tuple of every key, because resources of one job are
rarely labelled alike: a bucket labelled `job=x` and a VM labelled `job=x, run=r7` are one job,
while their label tuples differ. Two keys with the same value are the same job (a JobSet named
like the `job` label of its checkpoint bucket).

Where the default keys come from (all seen in real exports or real controllers):

- `k8s-label/<key>`: Mozilla's billing views filter on `k8s-label/workflows.argoproj.io/workflow`
  and `k8s-label/app.kubernetes.io/created-by` (mozilla/bigquery-etl sql/moz-fx-data-shared-prod/
  monitoring_derived/outerbounds_cost_per_flow_run_v1/view.sql @ d6519a59); the pod label key keeps
  its prefix and `/`.
- `jobset.sigs.k8s.io/jobset-name`: the label JobSet puts on every pod of a JobSet (kubernetes-sigs/
  jobset; used as the pod selector by Kubeflow Trainer); `batch.kubernetes.io/job-name` and the
  older `job-name`: the labels the Job controller puts on its pods (Kubernetes "Jobs" docs).
- `vertex-ai-pipelines-run-billing-id`: the label Vertex AI Pipelines puts on a run's resources for
  billing (a reserved PipelineJob label key: google-cloud-aiplatform PipelineJob `labels` docs;
  "Resource labeling by Vertex AI Pipelines", cloud.google.com/vertex-ai/docs/pipelines/
  gcpc-label-propagation). A CustomJob's own labels are plain labels: list them in `labels`.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["K8S_LABEL_PREFIX", "JobsConfig", "check_label_keys"]

#: How GKE cost allocation writes a Kubernetes pod label's key into the export's `labels`.
K8S_LABEL_PREFIX = "k8s-label/"


def check_label_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    """A list of label keys as config gives it (`[jobs] labels`, `[billing] labels`): each a key
    a billing row can carry, once (`[billing] labels = ["", "team name"]` was taken as is)."""
    for key in keys:
        if not key or key != key.strip() or " " in key or "," in key or "=" in key:
            raise ValueError(f'label keys are non-empty, without spaces, "," or "=", got "{key}"')
    if len(set(keys)) != len(keys):
        raise ValueError("a label key is listed twice")
    return keys


class JobsConfig(BaseModel):
    """`[jobs]`: the label keys naming a job (see the module docstring for the precedence), and how
    recent a job's last hour must be for it to count as `running` (billing lags by hours; estimated
    hours from utilization count)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    labels: tuple[str, ...] = ("job", "run")
    k8s_labels: tuple[str, ...] = (
        "jobset.sigs.k8s.io/jobset-name",
        "batch.kubernetes.io/job-name",
        "job-name",
    )
    vertex_labels: tuple[str, ...] = ("vertex-ai-pipelines-run-billing-id",)
    running_within_hours: int = Field(default=6, ge=1, le=24 * 7)
    #: `[jobs.budgets]`: USD per job, keyed by job name or by any job label's value (`llm-pretrain =
    #: 50000`); the `job_budget` detector warns when a job's burn rate is set to cross it.
    budgets: dict[str, float] = Field(default_factory=dict)

    @field_validator("budgets", mode="before")
    @classmethod
    def _amounts(cls, v: Any) -> Any:
        for key, amount in v.items() if isinstance(v, dict) else ():
            if isinstance(amount, bool):  # `= true` was read as $1
                raise ValueError(f'"{key}" = {str(amount).lower()}: a job budget is an amount in USD')
        return v

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, v: dict[str, float]) -> dict[str, float]:
        for key, amount in v.items():
            if not key or key != key.strip():
                raise ValueError(f'a budget is keyed by a job name or label value, got "{key}"')
            if not math.isfinite(amount) or amount <= 0:
                raise ValueError(
                    f'"{key}" = {amount:g}: a job budget is a positive amount in USD, e.g. "{key}" = 50000'
                )
        return v

    @field_validator("labels", "k8s_labels", "vertex_labels")
    @classmethod
    def _keys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return check_label_keys(v)

    def label_keys(self) -> tuple[str, ...]:
        """Every export label key that names a job, in precedence order (first present wins).

        >>> JobsConfig(labels=("job",), k8s_labels=("app",), vertex_labels=()).label_keys()
        ('job', 'k8s-label/app')
        """
        keys = (*self.labels, *(K8S_LABEL_PREFIX + k for k in self.k8s_labels), *self.vertex_labels)
        return tuple(dict.fromkeys(keys))
