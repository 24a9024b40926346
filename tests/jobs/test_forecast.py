"""The forecast: the article's two measured runs, physics everywhere else, and history that corrects it."""

from __future__ import annotations

import pytest

from jobs.planning.forecast import (
    Forecast,
    PastRun,
    about_duration,
    about_usd,
    forecast,
    summary,
)
from jobs.planning.grammar import parse_command
from jobs.planning.spec import JobSpec
from jobs.planning.workload import DATASETS, model_shape, workload_of

FULL_SQUAD = "bert-squad max_steps=none"  # the article's data-parallel recipe without the preset's step cap
ONE_V100 = f"{FULL_SQUAD} instances=1 type=ml.p3.2xlarge distribution=none"


def spec(text: str) -> JobSpec:
    return parse_command(text, max_instances=64)


def seconds(text: str, **kwargs: object) -> float:
    found = forecast(spec(text), **kwargs)  # type: ignore[arg-type]
    assert found.seconds is not None
    return found.seconds


def usd(text: str) -> float:
    found = forecast(spec(text))
    assert found.usd is not None
    return found.usd


# -- the article --------------------------------------------------------------------------------------


def test_data_parallel_on_two_p3_16xlarge_takes_about_28_minutes_and_24_dollars() -> None:
    assert seconds(FULL_SQUAD) == pytest.approx(28 * 60, rel=0.25)
    assert usd(FULL_SQUAD) == pytest.approx(24.0, rel=0.25)


def test_one_p3_2xlarge_takes_about_4_hours_and_15_dollars() -> None:
    assert seconds(ONE_V100) == pytest.approx(4 * 3600, rel=0.25)
    assert usd(ONE_V100) == pytest.approx(15.0, rel=0.25)


def test_the_card_words() -> None:
    assert summary(forecast(spec(FULL_SQUAD))) == "about 28 min, about $24"
    assert summary(forecast(spec(ONE_V100))) == "about 4 h, about $15"


# -- physics ------------------------------------------------------------------------------------------


def training(text: str) -> float:
    found = forecast(spec(text))
    assert found.training_seconds is not None
    return found.training_seconds


@pytest.mark.parametrize(
    ("slower", "faster"),
    [
        ("ml.g4dn.12xlarge", "ml.p3.8xlarge"),  # 4 x T4 -> 4 x V100
        ("ml.p3.16xlarge", "ml.p4d.24xlarge"),  # 8 x V100 -> 8 x A100
        ("ml.p4d.24xlarge", "ml.p5.48xlarge"),  # 8 x A100 -> 8 x H100
        ("ml.g5.48xlarge", "ml.p4d.24xlarge"),  # 8 x A10G -> 8 x A100
    ],
)
def test_a_faster_gpu_trains_faster(slower: str, faster: str) -> None:
    base = "model=bert-base-uncased dataset=squad distribution=ddp epochs=1 fp16=yes"
    assert training(f"{base} type={faster}") < training(f"{base} type={slower}")


def test_a_smaller_model_trains_faster() -> None:
    base = "dataset=imdb type=ml.p3.2xlarge epochs=1"
    times = [training(f"{base} model={m}") for m in
             ("roberta-large", "bert-base-uncased", "distilbert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2")]
    assert times == sorted(times, reverse=True) and len(set(times)) == 4


def test_more_steps_cost_more_and_take_longer() -> None:
    figures = [forecast(spec(f"bert-squad max_steps={steps}")) for steps in (10, 100, 1000, 10000)]
    assert [f.usd for f in figures] == sorted(f.usd or 0 for f in figures)
    assert [f.seconds for f in figures] == sorted(f.seconds or 0 for f in figures)
    assert len({f.usd for f in figures}) == 4
    # The training part grows with the steps; the start-up around it does not.
    assert figures[3].training_seconds == pytest.approx(10 * (figures[2].training_seconds or 0))
    assert figures[3].startup_seconds == pytest.approx(figures[2].startup_seconds)


def test_more_epochs_train_more_samples() -> None:
    assert training("distilbert-spot epochs=3") == pytest.approx(3 * training("distilbert-spot epochs=1"), rel=0.01)


def test_mixed_precision_is_faster_than_fp32() -> None:
    assert training("distilbert-spot fp16=yes") < training("distilbert-spot")


def test_longer_sequences_cost_more_than_in_proportion() -> None:
    short, long = training(f"{ONE_V100} max_seq_length=192"), training(f"{ONE_V100} max_seq_length=384")
    assert long > 2 * short  # attention grows with the square of the length


def test_more_instances_are_faster_but_less_than_in_proportion() -> None:
    one, two, four = (training(f"{FULL_SQUAD} instances={n}") for n in (1, 2, 4))
    assert one > two > four
    assert two > one / 2 and four > two / 2  # the network between instances costs something
    assert usd(f"{FULL_SQUAD} instances=4") > usd(f"{FULL_SQUAD} instances=1")


def test_spot_costs_less_for_the_same_time() -> None:
    spot, on_demand = forecast(spec("distilbert-spot")), forecast(spec("distilbert-spot spot=no"))
    assert spot.seconds == on_demand.seconds
    assert spot.usd is not None and on_demand.usd is not None and spot.usd < on_demand.usd
    assert spot.on_demand_usd == pytest.approx(on_demand.usd)


def test_an_unknown_dataset_needs_a_step_cap() -> None:
    unknown = forecast(spec("model=bert-base-uncased dataset=my_org/reviews task=text-classification"))
    assert unknown.seconds is None and unknown.usd is None and "my_org/reviews" in unknown.basis
    assert summary(unknown).startswith("no forecast: ")
    capped = forecast(spec("model=bert-base-uncased dataset=my_org/reviews task=text-classification max_steps=500"))
    assert capped.seconds is not None and capped.steps == 500


# -- the work -----------------------------------------------------------------------------------------


def test_max_steps_none_trains_the_full_epochs() -> None:
    capped, full = workload_of(spec("bert-squad")), workload_of(spec(FULL_SQUAD))
    assert (capped.steps, capped.global_batch, capped.capped_by_steps) == (100, 64, True)
    assert full.steps == 2 * -(-DATASETS["squad"].train // 64) and not full.capped_by_steps  # 2 epochs
    assert full.train_samples == pytest.approx(2 * 87_599, rel=0.01)


def test_the_global_batch_counts_every_replica() -> None:
    assert workload_of(spec(ONE_V100)).global_batch == 4
    assert workload_of(spec("bert-squad")).global_batch == 4 * 8 * 2  # 16 GPUs, data parallel
    assert workload_of(spec("roberta-mnli")).global_batch == 16 * (8 // 4)  # 8 GPUs, 4 pipeline partitions
    assert workload_of(spec("roberta-mnli instances=2")).global_batch == 16 * (8 * 2 // 4)
    assert workload_of(spec("distilbert-spot type=ml.p3.8xlarge")).global_batch == 32 * 4  # DataParallel


def test_known_dataset_sizes_and_the_scripts_defaults() -> None:
    assert (DATASETS["squad"].train, DATASETS["mnli"].train, DATASETS["imdb"].train) == (87_599, 392_702, 25_000)
    work = workload_of(spec("model=bert-base-uncased dataset=mnli"))
    assert work.train_examples == 392_702 and work.global_batch == 8  # the Trainer's default batch
    assert work.steps == 3 * -(-392_702 // 8)  # three epochs by default
    assert work.eval_samples == DATASETS["mnli"].eval  # evaluated once (do_eval by default)


def test_model_shapes_known_and_guessed() -> None:
    assert model_shape("bert-large-uncased-whole-word-masking").parameters == pytest.approx(302e6, rel=0.01)
    assert model_shape("distilbert-base-uncased").layers == 6
    assert model_shape("someone/my-large-model").hidden == 1024 and not model_shape("someone/my-large-model").known
    assert model_shape("s3://bucket/model").layers == 12  # nothing to go on: base size


# -- history ------------------------------------------------------------------------------------------


def test_history_replaces_physics_with_what_earlier_runs_measured() -> None:
    physics = forecast(spec(ONE_V100))
    assert physics.basis == "physics" and physics.physics_samples_per_second is not None
    slow = PastRun(predicted_samples_per_second=20.0, measured_samples_per_second=10.0, startup_seconds=900.0)
    learned = forecast(spec(ONE_V100), history=[slow])
    assert learned.basis == "1 earlier run"
    assert learned.samples_per_second == pytest.approx(physics.physics_samples_per_second / 2)
    assert learned.training_seconds == pytest.approx(2 * (physics.training_seconds or 0))
    assert learned.startup_seconds == 900.0
    assert (learned.usd or 0) > (physics.usd or 0)


def test_history_takes_the_median_of_the_newest_runs() -> None:
    runs = [PastRun(10.0, ratio * 10.0, startup) for ratio, startup in ((1.0, 100.0), (2.0, 200.0), (9.0, 300.0))]
    learned = forecast(spec(ONE_V100), history=runs)
    assert learned.basis == "3 earlier runs"
    assert learned.samples_per_second == pytest.approx(2.0 * (learned.physics_samples_per_second or 0))
    assert learned.startup_seconds == 200.0
    many = forecast(spec(ONE_V100), history=runs * 4)
    assert many.basis == "5 earlier runs"


def test_the_json_names_seconds_usd_and_basis() -> None:
    data = forecast(spec(FULL_SQUAD)).to_json()
    assert {"seconds", "usd", "basis"} <= set(data)
    again = Forecast.from_json(data)
    assert (again.seconds, again.usd, again.basis, again.steps) == (data["seconds"], data["usd"], "physics", data["steps"])


@pytest.mark.parametrize(
    ("value", "words"), [(42, "42 s"), (1680, "28 min"), (14400, "4 h"), (16200, "4 h 30 min"), (7190, "2 h")]
)
def test_about_duration(value: float, words: str) -> None:
    assert about_duration(value) == words


def test_about_usd() -> None:
    assert (about_usd(0.416), about_usd(25.4), about_usd(1351.3)) == ("$0.42", "$25", "$1,351")


# -- a causal LM's fine-tune, in tokens --------------------------------------------------------------------


def test_an_llm_fine_tune_is_counted_in_tokens_through_its_decoder() -> None:
    lora = workload_of(spec("llm-lora"))
    assert lora.in_tokens and lora.seq_len == 1024 and lora.train_tokens == 500 * 16 * 1024
    assert lora.model.parameters == 6_530_000_000  # Qwen2.5-7B's card, not 12 x layers x hidden^2
    assert lora.passes == 3.0  # LoRA: forward and activations' backward, plus the checkpointed recompute
    assert workload_of(spec("llm-lora gradient_checkpointing=no")).passes == 2.0
    assert workload_of(spec("llm-fsdp")).passes == 4.0  # every weight's gradient, FSDP's activation checkpointing
    assert model_shape("acme/chat-13B-v2").parameters == int(13e9 * 0.86)  # sized by its name


def test_the_forecast_says_tokens_a_second_and_history_still_corrects_it() -> None:
    found = forecast(spec("llm-lora"))
    assert found.tokens_per_second is not None and found.samples_per_second is not None
    assert found.tokens_per_second == pytest.approx(found.samples_per_second * 1024)
    # the L40S's 362 TFLOP/s at 35%, over three passes of 2 x 6.53e9 FLOPs a token and the attention's 4 x s x h x l
    per_token = 3 * (2 * 6.53e9 + 4 * 1024 * 3584 * 28)
    assert found.tokens_per_second == pytest.approx(362e12 * 0.35 / per_token, rel=1e-6)
    slower = forecast(spec("llm-lora"), history=[PastRun(1.0, 0.5, 600.0)])
    assert slower.tokens_per_second == pytest.approx(found.tokens_per_second / 2)
    assert forecast(spec("distilbert-spot")).tokens_per_second is None  # the article's recipes stay in samples
    assert Forecast.from_json(found.to_json()).tokens_per_second == pytest.approx(found.tokens_per_second, abs=1)
