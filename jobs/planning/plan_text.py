"""The plan as ``trainbot plan`` prints it: the job, where it runs and may move to, and what it costs."""

from __future__ import annotations

from jobs.planning import own_code
from jobs.planning.batch import ACCUMULATION, PER_DEVICE
from jobs.planning.fallbacks import adjustable
from jobs.planning.forecast import Forecast, about_duration, summary
from jobs.planning.images import image_packages
from jobs.planning.instances import instance_info
from jobs.planning.max_run import advice_words, max_run_advice
from jobs.planning.plan import DISTRIBUTION_LABELS, LaunchPlan, code_label
from jobs.planning.prices import usd
from jobs.planning.pricing import CostEstimate
from jobs.planning.spec import JobSpec

#: What the plan says an image ships (the data file has more).
IMAGE_PACKAGES_SHOWN = ("transformers", "trl", "peft", "accelerate")


def render_plan_text(plan: LaunchPlan) -> str:
    """The plan as ``trainbot plan`` prints it: the job, where it runs, and what it costs."""
    spec, est = plan.spec, plan.estimator
    info = instance_info(spec.instance_type)
    what = spec.task or f"own code {spec.entry}"
    title = f"Plan{' for ' + spec.preset if spec.preset else ''}: {what}, {spec.model_label} on {spec.data_label}"
    lines = [
        title,
        f"Instances: {spec.instance_count} x {spec.instance_type} "
        f"({spec.instance_count * info.gpus} x {info.accelerator} {info.gpu_memory_gb} GB)",
        f"Distribution: {DISTRIBUTION_LABELS[spec.distribution]}{_mp_summary(spec)}",
        f"Framework: transformers {spec.transformers_version}, PyTorch {spec.pytorch_version}, {spec.py_version}",
        image_line(spec, est),
        f"Entry point: {est['entry_point']} in {est['source_dir']}",
        *own_code_lines(spec),
        *channel_lines(plan.inputs),
        "Hyperparameters: " + " ".join(f"{k}={v}" for k, v in est["hyperparameters"].items()),
        batch_line(plan),
        _spot_line(spec),
        *(plan.fallbacks.lines() if plan.fallbacks is not None else []),
        f"Checkpoints: {est.get('checkpoint_s3_uri') or 'none (no spot, no checkpoint_minutes=)'}",
        *environment_lines(est.get("environment")),
        f"Output: {est['output_path']}",
        *forecast_lines(plan),
        *cost_lines(plan.cost, spec),
    ]
    return "\n".join(lines)


def image_line(spec: JobSpec, estimator: dict[str, object]) -> str:
    """``Image: the SDK's huggingface-pytorch-training ...`` or the URI of one newer than the SDK's tables."""
    uri = estimator.get("image_uri")
    if not uri:
        return "Image: the SageMaker SDK's Hugging Face training image of these versions"
    return f"Image: {uri} (newer than the SDK's tables: passed as image_uri; {_packages(spec)})"


def _packages(spec: JobSpec) -> str:
    row = image_packages(spec.transformers_version, spec.pytorch_version, spec.py_version)
    if row is None:
        return "its packages unknown"
    shown = [f"{name} {version}" for name, version in row.packages if name in IMAGE_PACKAGES_SHOWN]
    return "ships " + ", ".join(shown)


def own_code_lines(spec: JobSpec) -> list[str]:
    """``Code: repo@<short sha>``, what saves its checkpoints and, for a spot job, how it resumes."""
    if spec.code is None:
        return []
    lines = [f"Code: {code_label(spec)}, entry {spec.entry}", own_checkpoint_line(spec)]
    if spec.spot:
        lines.append(own_code.SPOT_RESUME_NOTE)
    return lines


def own_checkpoint_line(spec: JobSpec) -> str:
    return own_code.checkpoint_words(spot=spec.spot, minutes=spec.checkpoint_minutes,
                                     trainer=spec.code_trainer, saves=spec.code_saves)


def environment_lines(environment: dict[str, str] | None) -> list[str]:
    """``Environment: NAME=VALUE ...``: the job's variables (env.NAME=, and the checkpoint entry's)."""
    if not environment:
        return []
    return ["Environment: " + " ".join(f"{k}={v}" for k, v in environment.items())]


def channel_lines(inputs: dict[str, str] | None) -> list[str]:
    """``Channels: train s3://..., test s3://...`` (the script reads each as SM_CHANNEL_<NAME>)."""
    if not inputs:
        return []
    return ["Channels: " + ", ".join(f"{name} {uri}" for name, uri in inputs.items())]


def batch_line(plan: LaunchPlan) -> str:
    """``Batch: global batch 64 (...)``; a team's script given neither batch setting keeps its own batch,
    which the bot cannot read (a relaunch then moves only to types with the planned GPU count)."""
    if plan.spec.own_code and not adjustable(plan.spec):
        return (f"Batch: the script's own (it is given neither {PER_DEVICE} nor {ACCUMULATION}); relaunches stay "
                f"on {plan.approved_batch.accelerators} GPU{'s' if plan.approved_batch.accelerators != 1 else ''} "
                "an instance, so it stays the same")
    return f"Batch: {plan.approved_batch.words()}"


def forecast_lines(plan: LaunchPlan) -> list[str]:
    """``Forecast: about 28 min, about $24 (physics: ...)`` and, for a scaled-down local run, its own."""
    lines = []
    if plan.forecast is not None:
        lines.append(f"Forecast: {summary(plan.forecast)}{_forecast_detail(plan.forecast)}")
        advice = max_run_advice(plan.spec, plan.forecast)
        if advice is not None:
            lines.append(f"Warning: {advice_words(advice)}")
    if plan.run_forecast is not None:
        run = plan.run_forecast
        # Without a figure the summary is the reason itself: said once.
        basis = "" if run.seconds is None or run.usd is None else f" ({run.basis})"
        lines.append(f"  this backend's run: {summary(run)}{basis}")
    return lines


def _forecast_detail(f: Forecast) -> str:
    if f.seconds is None or f.training_seconds is None or f.startup_seconds is None:
        return ""
    rate = f"{f.samples_per_second:,.1f} samples/s" if f.samples_per_second else "-"
    if f.tokens_per_second:  # a causal LM's fine-tune is counted in tokens
        rate = f"{f.tokens_per_second:,.0f} tokens/s"
    return (f" ({f.basis}: {about_duration(f.training_seconds)} training at {rate}, "
            f"{about_duration(f.startup_seconds)} start-up, evaluation and upload)")


def _mp_summary(spec: JobSpec) -> str:
    if spec.distribution != "model":
        return ""
    params = ", ".join(f"{k} {v}" for k, v in (spec.mp_parameters or {}).items())
    return f"; {spec.processes_per_host} processes a host; {params}"


def _spot_line(spec: JobSpec) -> str:
    if not spec.spot:
        return f"Spot: no; max run {_duration(spec.max_run)}"
    fallback = "; may fall back to on-demand" if spec.on_demand_fallback else ""
    return (
        f"Spot: yes; max run {_duration(spec.max_run)}, max wait {_duration(spec.max_wait or 0)}; "
        f"up to {spec.max_restarts} relaunches{fallback}"
    )


def cost_lines(cost: CostEstimate, spec: JobSpec) -> list[str]:
    """``Cost: $X/hour ...``, the lineage's worst case and the spot price."""
    if cost.spot_hourly_usd is None:
        lines = [f"Cost: {usd(cost.hourly_usd)}/hour on-demand"]
    else:
        lines = [f"Cost: {usd(cost.spot_hourly_usd)}/hour at a typical spot price ({usd(cost.hourly_usd)}/hour "
                 f"on-demand; spot savings about {cost.spot_savings_pct:.0f}%)"]
    lines.append(f"  worst case {usd(cost.worst_case_usd)}: {worst_case_words(cost, spec)}")
    return lines


def worst_case_words(cost: CostEstimate, spec: JobSpec) -> str:
    """``6 attempts x 24h on ml.p3.16xlarge at on-demand`` (and the cap, when it lowered the figure)."""
    attempts = f"{cost.attempts} attempt{'s' if cost.attempts != 1 else ''}"
    text = f"{attempts} x {_duration(spec.max_run)} on {spec.instance_count} x {cost.dearest_type} at on-demand"
    if cost.capped_by_usd is not None:
        text += f", stopped at the {usd(cost.capped_by_usd)} per-job cap (TRAINBOT_MAX_JOB_USD)"
    return text


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
