"""A local gRPC server speaking the real `google.cloud.billing.v1.CloudCatalog/ListSkus` protocol.

The real `CloudCatalogClient` talks to it over an insecure channel on 127.0.0.1 (port 0). It pages
the SKUs it was given (`page_size` per page, tokens "page-N"), records every request, and can be
told to fail the next calls with a gRPC status, to exercise retries and the cache.

`REAL_SKUS` is a Compute Engine catalog made of real SKU descriptions with real prices (USD), each
line citing its source:
- [vms] skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv` @017e2502 accelerator rows (Price and
  SpotPrice per GPU, rounded to 5 decimals by SkyPilot) and the host-only a2-highgpu-1g /
  a2-ultragpu-1g rows (A2 vCPU and RAM rates solve from them).
- [fixture] public code index record 55513368414, a CSV of catalog rows (repository not named):
  `Nvidia H100 80GB GPU running in Americas` 9.796550569, `Nvidia H100 80GB Plus GPU running in
  Americas` 10.344275712, `H200 141GB GPU running in Americas` 9.31174.
- [arr-coc] djwar42/arr-coc-0-1 @a89b4249 `PLAN-MD-FILES/november/15th/` (Catalog API read
  2025-11-16): T4 `... running in Americas` 0.35, `Commitment v1: ... for 1 Year` 0.22, `... for 3
  Years` 0.16, `Nvidia Tesla T4 GPU attached to Spot Preemptible VMs ...` 0.14.
- [hail] hail-is/hail `batch/batch/cloud/gcp/driver/pricing.py`: L4 and G2 SKUs name the city,
  `Nvidia L4 GPU running in Iowa`, `Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa`,
  `G2 Instance Ram running in Iowa`.
- [gpu-hourly] public code index record 70214249507 (a catalog fetcher): `Nvidia H100 80GB GPU
  attached to Spot Preemptible VMs running in Americas`, `Spot Preemptible A3 Instance Core running
  in Americas`; tgarg01/silybench-data `derived/csv/gpu_prices.csv` (2026-09-26): that Spot GPU SKU
  at 5.8632 in us-central1.
- [google-sku-yaml] a Google-copyright pricing script (public code index record 4353159252):
  `Commitment v1: A2 Cpu in%`, `Reserved Nvidia H100 80GB Mega GPU in%`.
- [spot-page] cloud.google.com/spot-vms/pricing (stored copy, hl=id): A2 Spot vCPU 0.01264, memory
  0.001695 per GiB-hour (the [vms] us-central1 host rows solve to the same).
- [gcp.md] /work/shared/reference/gcp.md section 3: `... DWS Defined Duration ...` variant wording,
  network SKU wording and inter-zone / internet egress list prices.
`serviceRegions` lists the regions whose [vms] rows carry the price (the real lists are longer).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc
from google.cloud import billing_v1

__all__ = ["REAL_SKUS", "FakeCatalog", "GrpcFake", "sku"]


class GrpcFake:
    """One unary-unary method served with proto-plus (de)serialisers; a context manager."""

    def __init__(self, service: str, method: str, request_type: Any, response_type: Any):
        self.requests: list[Any] = []
        self.failures: deque[grpc.StatusCode] = deque()
        self.fail_always: grpc.StatusCode | None = None
        # While `hold` is set to an unset Event, calls wait on it (`held` says one arrived): a
        # response in flight, for a test that kills the client at that moment.
        self.hold: threading.Event | None = None
        self.held = threading.Event()
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
        hold = self.hold
        if hold is not None:
            self.held.set()
            hold.wait(60)
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


AMERICAS = ("us-central1", "us-east4", "us-west1")


def _gpu(description: str, usage: str, regions: Sequence[str], price: tuple[int, int]) -> billing_v1.Sku:
    return sku(description, usage, regions, price)


REAL_SKUS: list[billing_v1.Sku] = [
    # [gcp.md] a DWS variant listed BEFORE the plain SKU: it must not win. Price: the figure SkyPilot's
    # first-match fetcher read for us-central1 [vms] (4.20076), which no plain Americas SKU can be.
    _gpu(
        "Nvidia H100 80GB GPU DWS Defined Duration running in Americas", "OnDemand", AMERICAS, (4, 200760000)
    ),
    _gpu("Nvidia H100 80GB GPU running in Americas", "OnDemand", AMERICAS, (9, 796550569)),  # [fixture]
    _gpu(  # [gpu-hourly]: the Spot INFIX wording; 5.8632 in us-central1
        "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas",
        "Preemptible",
        ("us-central1",),
        (5, 863200000),
    ),
    # [vms] europe-west4 row; EMEA H100 SKUs name the city ([fixture] lists `... running in Frankfurt`)
    _gpu("Nvidia H100 80GB GPU running in Netherlands", "OnDemand", ("europe-west4",), (12, 735520000)),
    _gpu("Nvidia H100 80GB Plus GPU running in Americas", "OnDemand", AMERICAS, (10, 344275712)),  # [fixture]
    _gpu("Reserved Nvidia H100 80GB Mega GPU in Americas", "OnDemand", AMERICAS, (0, 0)),  # [google-sku-yaml]
    _gpu("H200 141GB GPU running in Americas", "OnDemand", AMERICAS, (9, 311740000)),  # [fixture]
    _gpu(
        "Nvidia Tesla A100 GPU running in Americas", "OnDemand", ("us-central1", "us-west1"), (2, 933910000)
    ),
    _gpu(  # [vms] A100 us-central1 / us-west1 SpotPrice
        "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
        "Preemptible",
        ("us-central1", "us-west1"),
        (1, 147200000),
    ),
    _gpu(
        "Nvidia Tesla A100 GPU running in EMEA", "OnDemand", ("me-west1",), (3, 227300000)
    ),  # [vms] me-west1
    _gpu("Nvidia L4 GPU running in Iowa", "OnDemand", ("us-central1",), (0, 560040000)),  # [hail] + [vms]
    _gpu(  # [hail] wording + [vms] us-central1 SpotPrice: the Spot infix with a CITY
        "Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa",
        "Preemptible",
        ("us-central1",),
        (0, 223100000),
    ),
    _gpu("Nvidia L4 GPU running in Virginia", "OnDemand", ("us-east4",), (0, 558210000)),  # [vms] us-east4
    _gpu(
        "Nvidia Tesla T4 GPU running in Americas", "OnDemand", ("us-central1",), (0, 350000000)
    ),  # [arr-coc]
    _gpu(  # [arr-coc]
        "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
        "Preemptible",
        ("us-central1",),
        (0, 140000000),
    ),
    _gpu(  # [arr-coc]
        "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year",
        "Commit1Yr",
        ("us-central1",),
        (0, 220000000),
    ),
    _gpu(  # [arr-coc]
        "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 3 Years",
        "Commit3Yr",
        ("us-central1",),
        (0, 160000000),
    ),
    # [vms] host rows (us-central1: a2-highgpu-1g 0.73948, a2-ultragpu-1g 1.09962) and [spot-page]
    sku("A2 Instance Core running in Americas", "OnDemand", ("us-central1",), (0, 31611000), group="CPU"),
    sku(
        "A2 Instance Ram running in Americas",
        "OnDemand",
        ("us-central1",),
        (0, 4237000),
        group="RAM",
        unit="GiBy.h",
    ),
    sku(
        "Spot Preemptible A2 Instance Core running in Americas",
        "Preemptible",
        ("us-central1",),
        (0, 12640000),
        group="CPU",
    ),
    sku(
        "Spot Preemptible A2 Instance Ram running in Americas",
        "Preemptible",
        ("us-central1",),
        (0, 1695000),
        group="RAM",
        unit="GiBy.h",
    ),
    # [hail] wording; fault injection: a RAM SKU whose unit is per MONTH must not be read as hourly
    sku(
        "G2 Instance Ram running in Iowa",
        "OnDemand",
        ("us-central1",),
        (2, 136710000),
        group="RAM",
        unit="GiBy.mo",
    ),
    # [gcp.md] wording and list prices: inter-zone 0.01/GiB; internet premium first paid tier 0.12
    sku(
        "Network Inter Zone Data Transfer Out",
        "OnDemand",
        AMERICAS,
        (0, 10000000),
        family="Network",
        group="InterzoneEgress",
        unit="GiBy",
    ),
    sku(
        "Network Internet Data Transfer Out from Americas to Americas",
        "OnDemand",
        AMERICAS,
        family="Network",
        group="PremiumInternetEgress",
        unit="GiBy",
        tiers=[(0.0, 0, 0), (1.0, 0, 120000000), (1024.0, 0, 110000000)],
    ),
    sku(
        "Balanced PD Capacity in Iowa",
        "OnDemand",
        ("us-central1",),
        (0, 100000000),
        family="Storage",
        group="SSD",
        unit="GiBy.mo",
    ),
]
