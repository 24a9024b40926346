"""Where relaunches may go and with which batch: the fallback orders, the global-batch arithmetic and the
plan of an attempt on another type. Pure: no store, no backend."""

from __future__ import annotations

import pytest

from jobs.errors import SpecError
from jobs.planning.batch import BatchNotKept, BatchSettings, change_words, keep_global_batch
from jobs.planning.fallbacks import ORDERS, Fallbacks, fallback_order, lineage_fallbacks, refusal
from jobs.planning.grammar import parse_command
from jobs.planning.instances import instance_info, instance_names
from jobs.planning.plan import build_plan


def fallbacks(text: str, order: str = "same-count") -> Fallbacks:
    plan = build_plan(parse_command(text, max_instances=16), bucket="b", lineage_id="x", recovery_order=order)
    assert plan.fallbacks is not None
    return plan.fallbacks


def order_of(text: str, order: str = "same-count") -> list[tuple[str, bool, int, int]]:
    return [(c.instance_type, c.spot, c.batch.per_device, c.batch.accelerators) for c in fallbacks(text, order).candidates]


def skipped(text: str, order: str = "any-count") -> dict[str, str]:
    return {s.instance_type: s.reason for s in fallbacks(text, order).skipped}


# ---------------------------------------------------------------- the presets


def test_distilbert_spot_keeps_one_gpu_across_families_before_anything_else() -> None:
    assert order_of("distilbert-spot") == [
        ("ml.p3.2xlarge", True, 32, 1),
        ("ml.g6e.xlarge", True, 32, 1),  # L40S 48 GB: the fastest at fp32 and, at $2.61 an hour, cheapest for the work
        ("ml.g6.xlarge", True, 32, 1),  # L4 24 GB: faster at fp32 than the V100
        ("ml.g5.xlarge", True, 32, 1),
        ("ml.g4dn.xlarge", True, 32, 1),  # T4 16 GB: half the V100's fp32, so after the ones as fast
    ]
    assert order_of("distilbert-spot", "same-type") == [("ml.p3.2xlarge", True, 32, 1)]


def test_distilbert_spot_any_count_adds_more_gpus_with_the_batch_divided_after_on_demand() -> None:
    order = order_of("distilbert-spot on_demand_fallback=yes", "any-count")
    assert order[:6] == [("ml.p3.2xlarge", True, 32, 1), ("ml.g6e.xlarge", True, 32, 1), ("ml.g6.xlarge", True, 32, 1),
                         ("ml.g5.xlarge", True, 32, 1), ("ml.g4dn.xlarge", True, 32, 1), ("ml.p3.2xlarge", False, 32, 1)]
    more = order[6:]
    assert [gpus for *_, gpus in more] == sorted(gpus for *_, gpus in more)  # fewest GPUs first
    assert {(per_device, gpus) for _, _, per_device, gpus in more} == {(8, 4), (4, 8)}
    assert ("ml.p3.8xlarge", True, 8, 4) in more and all(spot for _, spot, *_ in more)


def test_bert_squad_moves_only_to_eight_gpu_types_smdistributed_runs_on() -> None:
    assert order_of("bert-squad") == [
        ("ml.p3.16xlarge", False, 4, 8), ("ml.p4d.24xlarge", False, 4, 8),
        ("ml.p4de.24xlarge", False, 4, 8), ("ml.p3dn.24xlarge", False, 4, 8),
    ]
    assert order_of("bert-squad", "any-count") == order_of("bert-squad")  # no type has more GPUs and smddp
    refused = skipped("bert-squad")
    for name in ("ml.p5.48xlarge", "ml.g5.48xlarge", "ml.g6.48xlarge"):
        assert refused[name].startswith("smdistributed runs only on ml.p3.16xlarge")


def test_roberta_mnli_model_parallel_keeps_its_eight_gpus() -> None:
    assert [name for name, *_ in order_of("roberta-mnli", "any-count")] == [
        "ml.p3.16xlarge", "ml.p4d.24xlarge", "ml.p3dn.24xlarge", "ml.p4de.24xlarge"]
    assert "Trainium" in skipped("roberta-mnli")["ml.trn1.32xlarge"]


# ---------------------------------------------------------------- 1-, 4- and 8-GPU types, and refusals


def test_a_four_gpu_type_keeps_four_then_eight_with_the_batch_halved() -> None:
    order = order_of("model=m dataset=imdb type=ml.g5.12xlarge hp.per_device_train_batch_size=6", "any-count")
    fours = [row for row in order if row[3] == 4]
    assert fours[0] == ("ml.g5.12xlarge", False, 6, 4) and ("ml.g6.12xlarge", False, 6, 4) in fours
    assert all(row[3] == 8 and row[2] == 3 for row in order if row not in fours)  # 6 x 4 = 3 x 8
    assert "ml.p3.8xlarge" in skipped("model=m dataset=imdb type=ml.g5.12xlarge")  # 16 GB a GPU < 24


def test_an_eight_gpu_type_has_nowhere_wider_to_go() -> None:
    order = order_of("model=m dataset=imdb type=ml.p4d.24xlarge bf16=yes", "any-count")
    assert {row[3] for row in order} == {8}
    assert [row[0] for row in order] == ["ml.p4d.24xlarge", "ml.g6e.48xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
                                         "ml.p5en.48xlarge", "ml.p4de.24xlarge"]
    reasons = skipped("model=m dataset=imdb type=ml.p4d.24xlarge bf16=yes")
    assert reasons["ml.p3dn.24xlarge"] == "32 GB a GPU, less than the planned 40 GB"
    assert "40 GB" in reasons["ml.g5.48xlarge"]  # A10G 24 GB < A100 40 GB
    wide = skipped("model=m dataset=imdb type=ml.g5.12xlarge bf16=yes distribution=ddp")
    assert wide["ml.p3dn.24xlarge"] == "the plan trains in bf16, which the NVIDIA V100 does not compute"


def test_an_old_image_refuses_the_gpus_its_cuda_does_not_know() -> None:
    text = "model=m dataset=imdb transformers_version=4.26.0"  # cu117
    names = [row[0] for row in order_of(text, "any-count")]
    assert "ml.g6.xlarge" not in names and "ml.p5.48xlarge" not in names and "ml.g5.xlarge" in names
    assert skipped(text)["ml.g6.xlarge"] == (
        "the transformers 4.26.0 / PyTorch 1.13.1 image is built on CUDA 11.7; the NVIDIA L4 needs CUDA 11.8 or newer")
    assert "ml.g6.xlarge" in [row[0] for row in order_of("model=m dataset=imdb")]  # 4.28.1 is cu118


def test_a_batch_no_whole_number_setting_keeps_is_skipped_with_why() -> None:
    text = "model=m dataset=imdb hp.per_device_train_batch_size=3"
    order = order_of(text, "any-count")
    assert {row[3] for row in order} == {1}  # 3 examples a step cannot be shared by 4 or 8 GPUs
    assert skipped(text)["ml.p3.8xlarge"] == (
        "4 GPUs cannot share the global batch of 3 in whole numbers (it would take 0.75 examples a GPU a step)")


def test_own_code_without_its_batch_setting_keeps_its_gpu_count() -> None:
    from jobs.planning.spec import JobSpec

    spec = parse_command("distilbert-spot", max_instances=16).model_copy(
        update={"code": "s3://b/code.tar.gz", "entry": "train.py", "hyperparameters": {}})
    assert isinstance(spec, JobSpec)
    found = lineage_fallbacks(spec, BatchSettings(8, 1, 1, 1), "any-count")
    assert {c.batch.accelerators for c in found.candidates} == {1}
    assert "hp.per_device_train_batch_size" in {s.instance_type: s.reason for s in found.skipped}["ml.p3.8xlarge"]


# Every GPU type (spec.py refuses Trainium at planning: no lineage starts there).
@pytest.mark.parametrize("name", [n for n in instance_names() if not instance_info(n).is_trainium])
def test_no_order_offers_a_type_it_refuses_or_a_smaller_gpu(name: str) -> None:
    planned = instance_info(name)
    text = f"model=m dataset=imdb type={name}" + (" distribution=ddp" if planned.gpus > 1 else "")
    spec = parse_command(text, max_instances=16)
    for order in ORDERS:
        found = fallbacks(text, order)
        assert found.candidates[0].instance_type == planned.name
        for candidate in found.candidates[1:]:
            other = instance_info(candidate.instance_type)
            assert refusal(spec, planned, other) is None
            assert other.gpu_memory_gb >= planned.gpu_memory_gb and other.gpus >= planned.gpus
            assert candidate.batch.global_batch == found.candidates[0].batch.global_batch
            if order != "any-count":
                assert other.gpus == planned.gpus


def test_an_unknown_order_is_named_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="same-count, any-count, same-type"):
        fallback_order("random")


# ---------------------------------------------------------------- the global batch


@pytest.mark.parametrize(
    ("planned", "gpus", "kept"),
    [
        (BatchSettings(4, 1, 1, 1), 4, BatchSettings(1, 1, 4, 1)),  # the p3.2xlarge -> p3.8xlarge
        (BatchSettings(32, 1, 1, 1), 8, BatchSettings(4, 1, 8, 1)),
        (BatchSettings(2, 2, 1, 1), 4, BatchSettings(1, 1, 4, 1)),  # the accumulation goes when the batch cannot
        (BatchSettings(4, 1, 4, 1), 1, BatchSettings(4, 4, 1, 1)),  # fewer GPUs: the accumulation rises
        (BatchSettings(4, 1, 8, 2), 4, BatchSettings(4, 2, 4, 2)),
        (BatchSettings(6, 1, 4, 1), 8, BatchSettings(3, 1, 8, 1)),
    ],
)
def test_the_global_batch_is_kept(planned: BatchSettings, gpus: int, kept: BatchSettings) -> None:
    assert keep_global_batch(planned, gpus) == kept
    assert kept.global_batch == planned.global_batch


def test_the_per_device_batch_never_grows_past_the_planned_one() -> None:
    with pytest.raises(BatchNotKept, match="per-device batch above the planned 4"):
        keep_global_batch(BatchSettings(4, 1, 4, 1), 1, adjustable=frozenset({"per_device_train_batch_size"}))


def test_what_changed_in_words() -> None:
    planned = BatchSettings(4, 1, 1, 1)
    assert change_words(planned, planned) == "1 GPU as planned"
    assert change_words(planned, BatchSettings(1, 1, 4, 1)) == (
        "4 GPUs, per-device batch 1 instead of 4, global batch 4 as planned")


# ---------------------------------------------------------------- the plan of an attempt


def test_an_attempt_on_four_gpus_divides_the_per_device_batch_and_the_store_keeps_the_approved() -> None:
    plan = build_plan(parse_command("distilbert-spot"), bucket="b", lineage_id="spot-1")
    attempt = plan.for_attempt(instance_type="ml.p3.8xlarge", spot=True)
    assert attempt.estimator["hyperparameters"]["per_device_train_batch_size"] == 8
    assert attempt.estimator["instance_type"] == "ml.p3.8xlarge"
    assert attempt.spec.hyperparameters["per_device_train_batch_size"] == 8  # what its forecast counts
    assert attempt.attempt_batch.global_batch == attempt.approved_batch.global_batch == 32
    assert attempt.recorded_batch() == (8, 1)
    assert plan.stored()["batch"]["global_batch"] == 32
    back = attempt.for_attempt(instance_type="ml.p3.2xlarge", spot=True)  # from the approved, not the attempt
    assert back.estimator["hyperparameters"]["per_device_train_batch_size"] == 32
    assert "gradient_accumulation_steps" not in back.estimator["hyperparameters"]


def test_an_attempt_that_cannot_keep_the_batch_is_refused_before_any_launch() -> None:
    plan = build_plan(parse_command("model=m dataset=imdb hp.per_device_train_batch_size=3"), bucket="b",
                      lineage_id="odd-1")
    with pytest.raises(SpecError, match="ml.p3.8xlarge cannot run odd-1 as approved: 4 GPUs cannot share"):
        plan.for_attempt(instance_type="ml.p3.8xlarge", spot=False)
