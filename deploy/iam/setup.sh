#!/usr/bin/env bash
# Least-privilege service account for gpucost. Read-only everywhere; it creates query jobs only.
#   BILLING_PROJECT   project holding the billing export dataset (query jobs run here)
#   DATASET           the export dataset
#   BILLING_ACCOUNT   billing account id (for the Budget API; optional)
#   MONITORED         space-separated projects whose GPU metrics are read
set -euo pipefail
: "${BILLING_PROJECT:?}" "${DATASET:?}" "${MONITORED:?}"
SA="gpucost@${BILLING_PROJECT}.iam.gserviceaccount.com"

gcloud iam service-accounts create gpucost --project "$BILLING_PROJECT" \
  --display-name "gpucost cost monitor" || true

# BigQuery: run jobs in the billing project, read only the export dataset.
gcloud projects add-iam-policy-binding "$BILLING_PROJECT" \
  --member "serviceAccount:$SA" --role roles/bigquery.jobUser
bq add-iam-policy-binding --member "serviceAccount:$SA" \
  --role roles/bigquery.dataViewer "${BILLING_PROJECT}:${DATASET}"

# Cloud Monitoring: read GPU utilization in each training project.
for p in $MONITORED; do
  gcloud projects add-iam-policy-binding "$p" \
    --member "serviceAccount:$SA" --role roles/monitoring.viewer
done

# Budgets (optional): read budgets of the billing account.
if [ -n "${BILLING_ACCOUNT:-}" ]; then
  gcloud billing accounts add-iam-policy-binding "$BILLING_ACCOUNT" \
    --member "serviceAccount:$SA" --role roles/billing.viewer
fi
# The Cloud Billing Catalog API (prices) needs no role, only the API enabled:
gcloud services enable cloudbilling.googleapis.com bigquery.googleapis.com \
  monitoring.googleapis.com billingbudgets.googleapis.com --project "$BILLING_PROJECT"
