"""A local gRPC server speaking the real `google.cloud.billing.budgets.v1.BudgetService/ListBudgets`.

Serves the budgets it was given for one billing account, `page_size` per page, and records requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.cloud.billing import budgets_v1

from tests.fakes.catalog_server import GrpcFake

__all__ = ["FakeBudgets"]


class FakeBudgets(GrpcFake):
    def __init__(self, billing_account: str, budgets: Sequence[budgets_v1.Budget], page_size: int = 2):
        super().__init__(
            "google.cloud.billing.budgets.v1.BudgetService",
            "ListBudgets",
            budgets_v1.ListBudgetsRequest,
            budgets_v1.ListBudgetsResponse,
        )
        self.parent = f"billingAccounts/{billing_account}"
        self.budgets = list(budgets)
        self.page_size = page_size

    def respond(self, request: budgets_v1.ListBudgetsRequest, context: grpc.ServicerContext) -> Any:
        if request.parent != self.parent:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"no access to {request.parent}")
        start = int(request.page_token or 0)
        end = start + min(self.page_size, request.page_size or self.page_size)
        token = str(end) if end < len(self.budgets) else ""
        return budgets_v1.ListBudgetsResponse(budgets=self.budgets[start:end], next_page_token=token)
