"""Table-driven tests of GPU model normalisation across SKUs, machine types and Monitoring labels."""

from __future__ import annotations

import pytest

from monitor.gpu_models import (
    GpuModel,
    MachineGpus,
    PriceKind,
    geo_of_region,
    gpus_for_machine_type,
    machine_family,
    normalize_gpu_model,
    parse_sku_description,
    region_of,
)

H100, A100_40, A100_80, L4, T4 = (
    GpuModel.H100_80GB,
    GpuModel.A100_40GB,
    GpuModel.A100_80GB,
    GpuModel.L4,
    GpuModel.T4,
)


@pytest.mark.parametrize(
    ("text", "model"),
    [
        # billing SKU descriptions
        ("Nvidia Tesla A100 GPU running in Americas", A100_40),
        ("Reserved Nvidia Tesla A100 80GB GPU in Americas", A100_80),
        ("Reserved Nvidia Tesla A100 80GB GPU in Seoul", A100_80),
        ("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Seoul", H100),
        (
            "Nvidia H100 Mega 80GB GPU attached to DWS Defined Duration VMs running in Seoul",
            GpuModel.H100_MEGA_80GB,
        ),
        ("DWS Calendar Mode A4 Nvidia B200 (1 gpu slice) in Seoul", GpuModel.B200),
        ("Nvidia H100 80GB Plus GPU running in Americas", GpuModel.H100_MEGA_80GB),  # A3 Plus = A3 Mega
        ("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", L4),
        ("Commitment v1: Nvidia Tesla T4 GPU running in Americas for 3 Years", T4),
        ("Commitment v1: Nvidia Tesla V100 GPU running in Seoul for 1 Year", GpuModel.V100),
        # Cloud Monitoring `model` labels (NVML names)
        ("NVIDIA H100 80GB HBM3", H100),
        ("NVIDIA A100-SXM4-40GB", A100_40),
        ("NVIDIA A100-SXM4-80GB", A100_80),
        ("NVIDIA L4", L4),
        ("Tesla T4", T4),
        ("Tesla V100-SXM2-16GB", GpuModel.V100),
        ("NVIDIA H200", GpuModel.H200_141GB),
        ("NVIDIA B200", GpuModel.B200),
        # GKE accelerator names
        ("nvidia-tesla-a100", A100_40),
        ("nvidia-a100-80gb", A100_80),
        ("nvidia-h100-80gb", H100),
        ("nvidia-h100-mega-80gb", GpuModel.H100_MEGA_80GB),
        ("nvidia-l4", L4),
        ("nvidia-tesla-t4", T4),
        ("nvidia-tesla-k80", GpuModel.K80),
        ("nvidia-rtx-pro-6000", GpuModel.RTX_PRO_6000),
        # not GPUs we know
        ("A2 Instance Core running in Americas", None),
        ("NVIDIA RTX 6000", None),
        ("AMD Instinct MI300X", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_gpu_model(text: str | None, model: GpuModel | None) -> None:
    assert normalize_gpu_model(text) is model


@pytest.mark.parametrize(
    ("machine_type", "expected"),
    [
        ("a3-highgpu-8g", MachineGpus(H100, 8)),
        ("a3-highgpu-1g", MachineGpus(H100, 1)),
        ("a3-megagpu-8g", MachineGpus(GpuModel.H100_MEGA_80GB, 8)),
        ("a3-ultragpu-8g", MachineGpus(GpuModel.H200_141GB, 8)),
        ("a2-highgpu-8g", MachineGpus(A100_40, 8)),
        ("a2-highgpu-1g", MachineGpus(A100_40, 1)),
        ("a2-megagpu-16g", MachineGpus(A100_40, 16)),
        ("a2-ultragpu-8g", MachineGpus(A100_80, 8)),
        ("a2-ultragpu-2g", MachineGpus(A100_80, 2)),
        ("g2-standard-4", MachineGpus(L4, 1)),
        ("g2-standard-32", MachineGpus(L4, 1)),
        ("g2-standard-24", MachineGpus(L4, 2)),
        ("g2-standard-48", MachineGpus(L4, 4)),
        ("g2-standard-96", MachineGpus(L4, 8)),
        ("zones/us-central1-a/machineTypes/a3-highgpu-8g", MachineGpus(H100, 8)),
        ("A2-HIGHGPU-4G", MachineGpus(A100_40, 4)),
        ("g2-standard-5", None),
        ("n1-standard-8", None),
        ("e2-medium", None),
        ("", None),
        (None, None),
    ],
)
def test_gpus_for_machine_type(machine_type: str | None, expected: MachineGpus | None) -> None:
    assert gpus_for_machine_type(machine_type) == expected


@pytest.mark.parametrize(
    ("machine_type", "family"),
    [("a3-highgpu-8g", "A3"), ("a2-ultragpu-8g", "A2"), ("g2-standard-4", "G2"), ("n2d-standard-2", "N2D")],
)
def test_machine_family(machine_type: str, family: str) -> None:
    assert machine_family(machine_type) == family


@pytest.mark.parametrize(
    ("description", "resource", "kind", "model_or_family", "variant", "geo"),
    [
        # Real catalog wording (sources: tests/fixtures/skus/real_skus.tsv header).
        ("Nvidia Tesla A100 GPU running in Americas", "gpu", PriceKind.ON_DEMAND, A100_40, None, "Americas"),
        ("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", "gpu", PriceKind.SPOT, L4, None,
         "Iowa"),
        ("Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year", "gpu", PriceKind.COMMIT_1Y, T4,
         None, "Americas"),
        ("Commitment v1: Nvidia Tesla T4 GPU running in Americas for 3 Years", "gpu", PriceKind.COMMIT_3Y, T4,
         None, "Americas"),
        ("Reserved Nvidia Tesla A100 80GB GPU in Americas", "gpu", PriceKind.ON_DEMAND, A100_80, "reserved",
         "Americas"),
        ("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Seoul", "gpu",
         PriceKind.ON_DEMAND, H100, "dws", "Seoul"),
        ("Nvidia H100 Mega 80GB GPU attached to DWS Defined Duration VMs running in Seoul", "gpu",
         PriceKind.ON_DEMAND, GpuModel.H100_MEGA_80GB, "dws", "Seoul"),
        ("DWS Calendar Mode A4 Nvidia B200 (1 gpu slice) in Seoul", "gpu", PriceKind.ON_DEMAND, GpuModel.B200,
         "dws", "Seoul"),
        ("Sole Tenancy Premium for C3 Instance Core running in Americas", "cpu", PriceKind.ON_DEMAND, None,
         "sole tenancy", "Americas"),
        ("A2 Instance Core running in Americas", "cpu", PriceKind.ON_DEMAND, "A2", None, "Americas"),
        ("A2 Instance Ram running in Americas", "ram", PriceKind.ON_DEMAND, "A2", None, "Americas"),
        ("N1 Standard Instance Ram running in Americas", "ram", PriceKind.ON_DEMAND, "N1", None, "Americas"),
        ("T2D AMD Instance Core running in Singapore", "cpu", PriceKind.ON_DEMAND, "T2D", None, "Singapore"),
        ("Spot Preemptible G2 Instance Core running in Salt Lake City", "cpu", PriceKind.SPOT, "G2", None,
         "Salt Lake City"),
        ("Network Inter Zone Egress", None, PriceKind.ON_DEMAND, None, None, None),
        ("Storage PD Capacity", None, PriceKind.ON_DEMAND, None, None, None),
    ],
)  # fmt: skip
def test_parse_sku_description(description, resource, kind, model_or_family, variant, geo) -> None:
    d = parse_sku_description(description)
    assert (d.resource, d.kind, d.variant, d.geo) == (resource, kind, variant, geo)
    if resource == "gpu":
        assert d.model is model_or_family
    elif resource in ("cpu", "ram"):
        assert d.family == model_or_family


@pytest.mark.parametrize(
    ("location", "region", "geo"),
    [
        ("us-central1-a", "us-central1", "americas"),
        ("us-central1", "us-central1", "americas"),
        ("northamerica-northeast2-b", "northamerica-northeast2", "americas"),
        ("southamerica-east1", "southamerica-east1", "americas"),
        ("europe-west4-c", "europe-west4", "emea"),
        ("me-central2", "me-central2", "emea"),
        ("africa-south1", "africa-south1", "emea"),
        ("asia-southeast1-b", "asia-southeast1", "apac"),
        ("australia-southeast1", "australia-southeast1", "apac"),
        ("US", "us", "americas"),
        ("global", "global", None),
        (None, None, None),
    ],
)
def test_region_and_geo(location: str | None, region: str | None, geo: str | None) -> None:
    assert region_of(location) == region
    assert geo_of_region(location) == geo
