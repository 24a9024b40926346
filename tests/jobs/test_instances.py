"""The instance table: every type is one SageMaker training offers (botocore's service model lists it in
CreateTrainingJob's TrainingInstanceType), with its GPUs, their memory, a price, and spot where it is offered."""

from __future__ import annotations

import botocore.session
import pytest

from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.instances import instance_info, instance_names
from jobs.planning.prices import hourly_usd, is_estimate, price_table


def test_every_type_is_one_sagemaker_training_offers() -> None:
    offered = set(botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceType").enum)
    assert set(instance_names()) <= offered


@pytest.mark.parametrize(("name", "gpus", "memory", "accelerator", "spot"), [
    ("ml.g6e.xlarge", 1, 48, "NVIDIA L40S", True),
    ("ml.g6e.12xlarge", 4, 48, "NVIDIA L40S", True),
    ("ml.g6e.48xlarge", 8, 48, "NVIDIA L40S", True),
    ("ml.p5e.48xlarge", 8, 141, "NVIDIA H200", False),
    ("ml.p5en.48xlarge", 8, 141, "NVIDIA H200", False),
    ("ml.p6-b200.48xlarge", 8, 179, "NVIDIA B200", False),
])
def test_todays_gpus(name: str, gpus: int, memory: int, accelerator: str, spot: bool) -> None:
    info = instance_info(name)
    assert (info.gpus, info.gpu_memory_gb, info.accelerator, info.spot, info.bf16) == (gpus, memory, accelerator,
                                                                                        spot, True)
    assert hourly_usd(name) > 0


def test_prices_say_their_source_date_and_which_are_estimates() -> None:
    additions = price_table()["additions"]
    assert additions["as_of"] and additions["source"]
    assert hourly_usd("ml.g6e.xlarge") == pytest.approx(2.611) and not is_estimate("ml.g6e.xlarge")
    for name in ("ml.p5e.48xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.g6e.16xlarge"):
        assert is_estimate(name) and additions["estimated"][name]


def test_spot_on_a_type_without_managed_spot_is_refused_in_one_sentence() -> None:
    with pytest.raises(SpecError) as refused:
        parse_command("llm-fsdp instance_type=ml.p5en.48xlarge spot=yes")
    assert "ml.p5en.48xlarge takes no managed spot" in refused.value.message
    assert parse_command("llm-fsdp instance_type=ml.p5en.48xlarge").instance_type == "ml.p5en.48xlarge"


def test_a_b200_needs_an_image_built_on_cuda_12_8() -> None:
    from tests.jobs.test_fallbacks import order_of, skipped

    assert "ml.p6-b200.48xlarge" in skipped("model=m dataset=imdb type=ml.p4d.24xlarge")  # 4.28.1: CUDA 11.8
    newest = order_of("model=m dataset=imdb type=ml.p4d.24xlarge transformers_version=5.3", "any-count")
    assert "ml.p6-b200.48xlarge" in [row[0] for row in newest]  # the 5.3 image is built on CUDA 13.0
