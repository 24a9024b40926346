"""The image table: the images newer than the SDK's tables, with their URI per region and what they ship; a
/train that names one by version, and the plan and card that name it."""

from __future__ import annotations

import json

import pytest

from handlers.cards import distribution_words, image_words
from jobs.errors import SpecError
from jobs.planning import images, versions
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.planning.plan_text import render_plan_text

TAG = "2.9.0-transformers5.3.0-gpu-py312-cu130-ubuntu22.04"


def test_the_newest_training_image_is_beyond_the_sdks_tables_with_what_it_ships() -> None:
    [newest] = images.beyond_sdk_images()
    assert (newest.transformers, newest.pytorch, newest.py, newest.cuda) == ("5.3.0", "2.9.0", "py312", "13.0")
    assert versions.Combination("5.3.0", "2.9.0", "py312") not in versions.sdk_training_combinations()
    assert {name: newest.package_version(name) for name in ("transformers", "trl", "peft", "accelerate")} == {
        "transformers": "5.3.0", "trl": "0.28.0", "peft": "0.18.1", "accelerate": "1.12.0"}
    assert newest.distributions == ("none", "ddp", "fsdp")


@pytest.mark.parametrize(("region", "uri"), [
    ("us-east-1", f"763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:{TAG}"),
    ("af-south-1", f"626614931356.dkr.ecr.af-south-1.amazonaws.com/huggingface-pytorch-training:{TAG}"),
    ("cn-north-1", f"727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/huggingface-pytorch-training:{TAG}"),
])
def test_its_uri_in_each_region_follows_the_dlc_registries(region: str, uri: str) -> None:
    assert versions.training_image_uri("5.3.0", "2.9.0", "py312", region) == uri
    assert versions.training_image_uri("4.28.1", "2.0.0", "py310", region) is None  # the SDK resolves its own


def test_every_row_documents_its_optional_fields_and_the_sdk_agrees_on_its_own() -> None:
    data = json.loads(images.IMAGES_FILE.read_text())
    documented = " ".join(data["schema"])  # the schema names each field it documents
    assert "image.repository" in documented and "dlc_registries" in documented and "lock" in documented
    for row in images.known_images():
        combo = versions.Combination(row.transformers, row.pytorch, row.py)
        assert row.beyond_sdk == (combo not in versions.sdk_training_combinations()), row.key


def test_train_with_transformers_5_3_plans_that_image_and_says_so() -> None:
    spec = parse_command("distilbert-spot transformers_version=5.3 instance_type=ml.g5.xlarge")
    assert (spec.transformers_version, spec.pytorch_version, spec.py_version) == ("5.3.0", "2.9.0", "py312")
    plan = build_plan(spec, bucket="b", lineage_id="l", region="eu-west-1")
    assert plan.estimator["image_uri"].endswith(f"eu-west-1.amazonaws.com/huggingface-pytorch-training:{TAG}")
    assert {"Key": "trainbot:image", "Value": "transformers5.3.0-pt2.9.0-py312"} in plan.estimator["tags"]
    text = render_plan_text(plan)
    assert f"Image: {plan.estimator['image_uri']} (newer than the SDK's tables: passed as image_uri" in text
    assert "trl 0.28.0, peft 0.18.1" in text
    assert image_words(spec) == f"huggingface-pytorch-training:{TAG} (by URI: newer than the SDK's tables)"
    assert "SDK's Hugging Face training image" in image_words(parse_command("distilbert-spot"))


def test_the_plan_and_card_say_which_modes_are_current_and_which_legacy() -> None:
    assert distribution_words("fsdp") == "fsdp (current)" and distribution_words("ddp") == "ddp (current)"
    assert distribution_words("data") == "data (legacy: the article's smdistributed)"
    assert distribution_words("model") == "model (legacy: the article's smdistributed)"
    assert "legacy" in render_plan_text(build_plan(parse_command("roberta-mnli"), bucket="b", lineage_id="l"))
    assert "current" in render_plan_text(build_plan(parse_command("llm-fsdp"), bucket="b", lineage_id="l"))


def test_the_llm_presets_need_an_image_with_trl_and_peft() -> None:
    with pytest.raises(SpecError) as refused:
        parse_command("llm-lora transformers_version=4.28.1")
    assert "TRL and PEFT" in refused.value.message and "5.3.0/pt2.9.0/py312" in refused.value.message


def test_a_transformers_5_model_is_served_by_the_inference_image_beyond_the_sdks_tables() -> None:
    from jobs.planning.serving import choose_framework

    choice = choose_framework("5.3.0", "2.9.0", "py312", "text-classification")
    assert (choice.framework.transformers, choice.framework.by_uri) == ("5.5.3", True)
    assert not choose_framework("4.28.1", "2.0.0", "py310", "text-classification").framework.by_uri
    image = images.inference_image("5.5.3", "2.6.0")
    assert image is not None and image.image_uri("eu-west-1", gpu=False) == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/huggingface-pytorch-inference:"
        "2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04")


def test_an_image_built_on_cuda_13_is_refused_on_a_v100_in_one_sentence() -> None:
    with pytest.raises(SpecError) as refused:
        parse_command("distilbert-spot transformers_version=5.3")  # the preset's ml.p3.2xlarge
    assert refused.value.message == (
        "ml.p3.2xlarge cannot run this job: the transformers 5.3.0 / PyTorch 2.9.0 image is built on CUDA 13.0, which "
        "no longer builds for the NVIDIA V100 (CUDA 12.9 was the last). Choose another instance_type or "
        "transformers_version=.")
    from tests.jobs.test_fallbacks import skipped

    refused_types = skipped("model=m dataset=imdb transformers_version=5.3 instance_type=ml.g4dn.12xlarge")
    assert refused_types["ml.p3.8xlarge"].endswith("no longer builds for the NVIDIA V100 (CUDA 12.9 was the last)")
    assert "ml.p3.8xlarge" not in skipped("model=m dataset=imdb instance_type=ml.g4dn.12xlarge")  # CUDA 11.8 does
