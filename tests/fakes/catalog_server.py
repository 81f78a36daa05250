"""A local gRPC server speaking the real `google.cloud.billing.v1.CloudCatalog/ListSkus` protocol.

The real `CloudCatalogClient` talks to it over an insecure channel on 127.0.0.1 (port 0). It pages
the SKUs it was given (`page_size` per page, tokens "page-N"), records every request, and can be
told to fail the next calls with a gRPC status, to exercise retries and the cache.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc
from google.cloud import billing_v1

__all__ = ["FakeCatalog", "GrpcFake", "sku"]


class GrpcFake:
    """One unary-unary method served with proto-plus (de)serialisers; a context manager."""

    def __init__(self, service: str, method: str, request_type: Any, response_type: Any):
        self.requests: list[Any] = []
        self.failures: deque[grpc.StatusCode] = deque()
        self.fail_always: grpc.StatusCode | None = None
        handler = grpc.unary_unary_rpc_method_handler(
            self._handle,
            request_deserializer=request_type.deserialize,
            response_serializer=response_type.serialize,
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {method: handler}),)
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"

    def respond(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise NotImplementedError

    def _handle(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        code = self.failures.popleft() if self.failures else self.fail_always
        if code is not None:
            context.abort(code, f"fake failure {code.name}")
        return self.respond(request, context)

    def fail_next(self, *codes: grpc.StatusCode) -> None:
        self.failures.extend(codes)

    def start(self) -> GrpcFake:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait()

    def __enter__(self) -> GrpcFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeCatalog(GrpcFake):
    def __init__(self, skus: Sequence[billing_v1.Sku], page_size: int = 2):
        super().__init__(
            "google.cloud.billing.v1.CloudCatalog",
            "ListSkus",
            billing_v1.ListSkusRequest,
            billing_v1.ListSkusResponse,
        )
        self.skus = list(skus)
        self.page_size = page_size
        self.fail_tokens: dict[str, grpc.StatusCode] = {}  # page_token -> status, e.g. fail page 2

    def tokens(self) -> list[str]:
        return [r.page_token for r in self.requests]

    def respond(self, request: billing_v1.ListSkusRequest, context: grpc.ServicerContext) -> Any:
        if request.parent != "services/6F81-5844-456A":
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.parent}")
        if request.page_token in self.fail_tokens:
            context.abort(self.fail_tokens[request.page_token], "fake failure on a later page")
        start = 0
        if request.page_token:
            if not request.page_token.startswith("page-"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad page token")
            start = int(request.page_token.removeprefix("page-"))
        end = start + min(self.page_size, request.page_size or self.page_size)
        token = f"page-{end}" if end < len(self.skus) else ""
        return billing_v1.ListSkusResponse(skus=self.skus[start:end], next_page_token=token)


def sku(
    description: str,
    usage_type: str = "OnDemand",
    regions: Sequence[str] = ("us-central1",),
    price: tuple[int, int] = (0, 0),
    *,
    unit: str = "h",
    group: str = "GPU",
    family: str = "Compute",
    tiers: Sequence[tuple[float, int, int]] | None = None,
    sku_id: str = "",
) -> billing_v1.Sku:
    """A Catalog SKU; `price` is (units, nanos); `tiers` [(start_usage_amount, units, nanos)]
    overrides it for tiered SKUs."""
    rates = tiers if tiers is not None else [(0.0, *price)]

    def make_rate(t: tuple[float, int, int]) -> billing_v1.PricingExpression.TierRate:
        money = {"currency_code": "USD", "units": t[1], "nanos": t[2]}
        return billing_v1.PricingExpression.TierRate(start_usage_amount=t[0], unit_price=money)

    return billing_v1.Sku(
        name=f"services/6F81-5844-456A/skus/{sku_id or description[:8]}",
        sku_id=sku_id,
        description=description,
        category=billing_v1.Category(
            service_display_name="Compute Engine",
            resource_family=family,
            resource_group=group,
            usage_type=usage_type,
        ),
        service_regions=list(regions),
        pricing_info=[
            billing_v1.PricingInfo(
                pricing_expression=billing_v1.PricingExpression(
                    usage_unit=unit, tiered_rates=[make_rate(t) for t in rates]
                )
            )
        ],
    )
