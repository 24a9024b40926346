"""The bot's cards as Block Kit: the plan card, the launch card, job lists and the final report.

Built only from `handlers.blocks` builders, so every card stays within Slack's limits whatever it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from handlers import blocks as bk
from handlers import texts
from jobs.lifecycle.progress import LiveProgress
from jobs.lineage import Attempt, Lineage
from jobs.planning import versions
from jobs.planning.batch import change_words, stored_batch, used_batch
from jobs.planning.forecast import Forecast, summary
from jobs.planning.max_run import advice_words, max_run_advice
from jobs.planning.own_code import SPOT_RESUME_NOTE
from jobs.planning.plan import code_label
from jobs.planning.plan_text import own_checkpoint_line
from jobs.planning.prices import cost_of, usd
from jobs.planning.pricing import CostEstimate
from jobs.planning.spec import JobSpec
from jobs.wording import counted

ACTION_LAUNCH = "train.launch"
ACTION_EDIT = "train.edit"
ACTION_CANCEL = "train.cancel"
ACTION_STOP = "job.stop"
ACTION_DEPLOY = "job.deploy"
ACTION_LOGS = "job.logs"
ACTION_UNDEPLOY = "endpoint.undeploy"
ACTION_PROMOTE = "endpoint.promote"
ACTION_ROLLBACK = "endpoint.rollback"
EDIT_CALLBACK = "train.edit_submit"


# ---------------------------------------------------------------- plan card


def spec_pairs(spec: JobSpec) -> list[tuple[str, str]]:
    pairs = [
        ("Task", spec.task or "own code"),
        ("Model", bk.escape(spec.model_label)),
        ("Dataset", bk.escape(spec.data_label)),
        ("Instances", f"{spec.instance_count} x {spec.instance_type}"),
        ("Distribution", distribution_words(spec.distribution)),
        ("Spot", "yes" if spec.spot else "no"),
        ("Max run", duration(spec.max_run)),
    ]
    if spec.max_wait is not None:
        pairs.append(("Max wait", duration(spec.max_wait)))
    pairs.append(("Versions", f"transformers {spec.transformers_version}, pytorch {spec.pytorch_version}, "
                              f"{spec.py_version}"))
    pairs.append(("Image", image_words(spec)))
    if spec.notify == "dm":
        pairs.append(("Notify", "a DM when it ends"))
    if spec.own_code:
        code = texts.PLAN_CODE_VALUE.format(code=code_label(spec), entry=spec.entry)
        pairs.append((texts.PLAN_CODE, bk.escape(code)))
    channels = spec.input_channels()
    if len(channels) > 1 or (channels and spec.own_code):  # the script reads each as SM_CHANNEL_<NAME>
        pairs.append(("Channels", bk.escape(", ".join(f"{name} {uri}" for name, uri in channels.items()))))
    if spec.hyperparameters:
        hps = ", ".join(f"{k}={v}" for k, v in spec.hyperparameters.items())
        pairs.append(("Hyperparameters", bk.escape(hps)))
    return pairs


def _price_line(cost: CostEstimate, instance: str, count: int) -> str:
    if cost.spot_hourly_usd is not None:
        return texts.PLAN_PRICE_SPOT.format(spot=usd(cost.spot_hourly_usd), on_demand=usd(cost.hourly_usd),
                                            count=count, instance=instance)
    return texts.PLAN_PRICE.format(on_demand=usd(cost.hourly_usd), count=count, instance=instance)


def distribution_words(distribution: str) -> str:
    """``fsdp (current)``, ``data (legacy: the article's smdistributed)``."""
    if distribution in versions.LEGACY_DISTRIBUTIONS:
        return f"{distribution} (legacy: the article's smdistributed)"
    return f"{distribution} (current)" if distribution in ("ddp", "fsdp") else distribution


def image_words(spec: JobSpec) -> str:
    """The training image: the repository and tag of one newer than the SDK's tables (pulled by its URI)."""
    row = versions.beyond_sdk(versions.Combination(spec.transformers_version, spec.pytorch_version, spec.py_version))
    if row is None:
        return "the SageMaker SDK's Hugging Face training image of these versions"
    return f"{row.image_label()} (by URI: newer than the SDK's tables)"


def cost_lines(cost: CostEstimate, max_job_usd: float | None, forecast: Forecast | None = None,
               count: int = 1, planned_type: str = "") -> list[str]:
    """Money, one thing a line: the forecast, the price an hour now, the worst case, the cap, what spot saves."""
    lines = []
    if forecast is not None:
        lines.append(texts.PLAN_FORECAST.format(summary=summary(forecast), basis=forecast.basis)
                     if forecast.seconds is not None else texts.PLAN_NO_FORECAST.format(reason=forecast.basis))
    lines.append(_price_line(cost, planned_type, count))
    lines.append(texts.PLAN_COST.format(worst=usd(cost.worst_case_usd), attempts=cost.attempts,
                                        instance=cost.dearest_type, count=count))
    if cost.capped_by_usd is not None:
        lines.append(texts.PLAN_CAPPED.format(cap=usd(cost.capped_by_usd)))
    if cost.spot_hourly_usd is not None and cost.spot_savings_pct is not None:
        spot_cost, on_demand = _spot_comparison(cost, forecast)
        lines.append(texts.PLAN_SPOT.format(spot_cost=usd(spot_cost), on_demand_cost=usd(on_demand),
                                            pct=cost.spot_savings_pct, saved=usd(on_demand - spot_cost)))
    if max_job_usd is not None and cost.capped_by_usd is None:
        lines.append(texts.PLAN_BUDGET.format(cap=usd(max_job_usd)))
    return lines


def checkpoint_line(minutes: float, save_steps: object) -> str:
    """The most work an interruption can cost: the image never passes SIGTERM on, so only saves count."""
    shown = f"{minutes:g} min" if minutes >= 1 else f"{minutes * 60:g} s"
    return texts.PLAN_CHECKPOINTS.format(minutes=shown, steps=save_steps if save_steps else 500)


def _spot_comparison(cost: CostEstimate, forecast: Forecast | None) -> tuple[float, float]:
    """(at the spot price, on demand): the forecast's bill when there is one, else one full max_run."""
    if forecast is not None and forecast.usd is not None and forecast.on_demand_usd is not None:
        return forecast.usd, forecast.on_demand_usd
    return cost.expected_usd, cost.on_demand_usd


def plan_card(spec: JobSpec, cost: CostEstimate, *, command: str, value: str, scaling_note: str | None,
              max_job_usd: float | None, spot_pct_if_on: float | None = None,
              forecast: Forecast | None = None, run_forecast: Forecast | None = None,
              in_dm: bool = False, from_dm: bool = False) -> list[bk.Block]:
    """The ephemeral card /train answers with: spec, forecast, cost, spot savings, the backend's note, buttons.
    ``in_dm``: the bot cannot post where the card was asked for, so Launch carries the job in a DM."""
    title = texts.PLAN_TITLE.format(model=spec.model_label, count=spec.instance_count, instance=spec.instance_type)
    lines = cost_lines(cost, max_job_usd, forecast, spec.instance_count, spec.instance_type)
    advice = max_run_advice(spec, forecast)
    if advice is not None:  # SageMaker would stop it at max_run: said right under the forecast
        lines.insert(1, f":warning: {advice_words(advice)}")
    if spec.own_code:  # what the team's script saves, and what the spot entry adds to its Trainer
        lines.append(own_checkpoint_line(spec))
    elif spec.checkpoint_minutes is not None:
        lines.append(checkpoint_line(spec.checkpoint_minutes, spec.hyperparameters.get("save_steps")))
    if not spec.spot and spot_pct_if_on:
        lines.append(texts.PLAN_SPOT_OFF.format(pct=spot_pct_if_on))
    if spec.spot and spec.own_code:
        lines.append(SPOT_RESUME_NOTE)  # what a team's script must do to resume after an interruption
    body: list[bk.Block] = [bk.header(title), bk.context(texts.PLAN_COMMAND.format(command=bk.escape(command)))]
    body += bk.fields(spec_pairs(spec))
    body.append(bk.section("\n".join(lines)))
    if scaling_note:
        if run_forecast is not None and run_forecast.seconds is not None:
            scaling_note += texts.PLAN_RUN_FORECAST.format(summary=summary(run_forecast), basis=run_forecast.basis)
        body.append(bk.context(texts.PLAN_SCALING.format(note=bk.escape(scaling_note))))
    launch = texts.BUTTON_LAUNCH_DM if in_dm else texts.BUTTON_LAUNCH
    if in_dm:  # where the job will post, said before Launch
        body.append(bk.context((texts.PLAN_FROM_DM if from_dm else texts.PLAN_IN_DM).format(button=launch)))
    body.append(bk.actions([
        bk.button(launch, ACTION_LAUNCH, value, style="primary"),
        bk.button(texts.BUTTON_EDIT, ACTION_EDIT, value),
        bk.button(texts.BUTTON_CANCEL, ACTION_CANCEL, value),
    ], block_id="plan"))
    return bk.message(body, cut_note=texts.BLOCKS_CUT)


def plan_fallback(spec: JobSpec, cost: CostEstimate, forecast: Forecast | None = None) -> str:
    likely = summary(forecast) if forecast is not None and forecast.seconds is not None else \
        texts.PLAN_FALLBACK_WORST.format(worst=usd(cost.worst_case_usd))
    return bk.fallback(texts.PLAN_FALLBACK.format(model=spec.model_label, count=spec.instance_count,
                                                  instance=spec.instance_type, likely=likely))


# ---------------------------------------------------------------- launch card


def attempt_cost(attempt: Attempt, instance_count: int) -> float:
    if not attempt.billable_seconds:
        return 0.0
    return cost_of(attempt.instance_type, instance_count, attempt.billable_seconds, attempt.spot)


def cost_so_far(lineage: Lineage) -> float:
    return sum(attempt_cost(a, lineage.spec.instance_count) for a in lineage.attempts)


def billed(amount: float, backend: object) -> str:
    """``$0.61``; a local run's as what SageMaker would bill for it (``$0.61 on SageMaker (free here)``)."""
    return texts.LOCAL_PRICE.format(cost=usd(amount)) if backend == "local" else usd(amount)


def status_word(status: str) -> str:
    return texts.STATUS_WORDS.get(status, status)


def attempt_line(attempt: Attempt, lineage: Lineage | None = None) -> str:
    """``2 on ml.g5.xlarge (spot): 1 GPU as planned, Training``: a relaunch says what its type changed."""
    market = "spot" if attempt.spot else "on-demand"
    detail = f", {attempt.secondary_status}" if attempt.secondary_status else ""
    return texts.ATTEMPT_LINE.format(number=attempt.number, instance=attempt.instance_type, market=market,
                                     change=attempt_change(attempt, lineage), detail=detail)


def attempt_change(attempt: Attempt, lineage: Lineage | None) -> str:
    """``: 4 GPUs, per-device batch 1 instead of 4, global batch 4 as planned`` for a relaunch; "" for the first."""
    if lineage is None or attempt.number == 1:
        return ""
    spec = lineage.spec
    planned = stored_batch(lineage.launch_plan, spec.hyperparameters, spec.instance_type, spec.instance_count)
    used = used_batch(planned, attempt.instance_type, attempt.per_device_batch, attempt.accumulation)
    return f": {change_words(planned, used)}"


def current_forecast(lineage: Lineage, planned: Forecast | None) -> tuple[Forecast | None, str]:
    """The forecast a card shows: the running attempt's on its type once a relaunch moved it, else the plan's."""
    latest = lineage.latest_attempt
    if latest is not None and latest.forecast:
        return Forecast.from_json(latest.forecast), latest.instance_type
    return planned, ""


def launch_card(lineage: Lineage, *, forecast: Forecast | None = None,
                live: LiveProgress | None = None) -> tuple[str, list[bk.Block]]:
    """The in-channel card of a lineage, updated in place: status, attempt, live progress, cost, forecast,
    Stop / Deploy. ``live`` shows only while the lineage runs."""
    status = lineage.status.value
    latest = lineage.latest_attempt
    running = not lineage.status.is_terminal() and live is not None
    pairs = [
        (texts.CARD_FIELDS["status"], status_word(status)),
        (texts.CARD_FIELDS["attempt"], attempt_line(latest, lineage) if latest else "-"),
    ]
    if running and live is not None:
        pairs.append((texts.CARD_FIELDS["progress"], progress_value(live)))
    pairs += [
        (texts.CARD_FIELDS["instances"], f"{lineage.spec.instance_count} x {lineage.spec.instance_type}"),
        (texts.CARD_FIELDS["cost"], usd(live.cost_so_far_usd if running and live else cost_so_far(lineage))),
    ]
    forecast, moved_to = current_forecast(lineage, forecast)
    if forecast is not None and forecast.seconds is not None:
        words = summary(forecast)
        pairs.append((texts.CARD_FIELDS["forecast"],
                      texts.CARD_FORECAST_ON.format(summary=words, instance=moved_to) if moved_to else words))
    pairs += [
        (texts.CARD_FIELDS["estimate"], usd(lineage.estimated_usd)),
        (texts.CARD_FIELDS["launched_by"], mention(lineage.launched_by)),
    ]
    body: list[bk.Block] = [bk.header(texts.CARD_TITLE.format(lineage=lineage.id))]
    body.append(bk.context(f"{bk.escape(lineage.spec.model_label)} on {bk.escape(lineage.spec.data_label)}",
                           texts.CARD_THREAD_HINT, texts.LOCAL_PRICES_NOTE if lineage.backend == "local" else ""))
    body += bk.fields(pairs)
    buttons = card_buttons(lineage)
    if buttons:
        body.append(bk.actions(buttons, block_id="card"))
    text = texts.CARD_FALLBACK.format(lineage=lineage.id, status=status)
    return bk.fallback(text), bk.message(body, cut_note=texts.BLOCKS_CUT)


def progress_value(live: LiveProgress) -> str:
    words = live.words_without_cost() or "-"
    if live.at is None:
        return words
    return texts.CARD_PROGRESS_AS_OF.format(progress=words, when=slack_time(live.at))


def slack_time(moment: datetime) -> str:
    """Slack's date token: shown in each reader's own time zone ("today at 2:04 PM"); UTC where it cannot be."""
    utc = moment.astimezone(timezone.utc)
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time}}|{utc:%Y-%m-%d %H:%M} UTC>"


def card_buttons(lineage: Lineage) -> list[bk.Block]:
    buttons = []
    if not lineage.status.is_terminal():
        buttons.append(stop_button(lineage.id))
    if lineage.status.value == "completed":
        buttons.append(bk.button(texts.BUTTON_DEPLOY, ACTION_DEPLOY, lineage.id, style="primary"))
    if lineage.status.value in ("failed", "gave_up"):
        buttons.append(bk.button(texts.BUTTON_LOGS, ACTION_LOGS, lineage.id))
    return buttons


def stop_button(lineage_id: str) -> bk.Block:
    """Stop, with Slack's question naming the job it stops."""
    element = bk.button(texts.BUTTON_STOP, ACTION_STOP, lineage_id, style="danger")
    element["confirm"] = bk.confirm(texts.CONFIRM_STOP_TITLE.format(lineage=lineage_id), texts.CONFIRM_STOP_TEXT,
                                    yes=texts.CONFIRM_STOP_YES, no=texts.CONFIRM_NO)
    return element


def undeploy_button(endpoint: str, hourly: str) -> bk.Block:
    """Undeploy, with Slack's question naming the endpoint and what it costs."""
    element = bk.button(texts.BUTTON_UNDEPLOY, ACTION_UNDEPLOY, endpoint, style="danger")
    element["confirm"] = bk.confirm(texts.CONFIRM_UNDEPLOY_TITLE.format(name=endpoint),
                                    texts.CONFIRM_UNDEPLOY_TEXT.format(name=endpoint, hourly=hourly),
                                    yes=texts.CONFIRM_UNDEPLOY_YES, no=texts.CONFIRM_KEEP)
    return element


def rollback_button(label: str, value: str, endpoint: str, serving: str) -> bk.Block:
    """Rollback, with Slack's question naming the endpoint and the model that stops serving."""
    element = bk.button(label, ACTION_ROLLBACK, value, style="danger")
    element["confirm"] = bk.confirm(texts.CONFIRM_ROLLBACK_TITLE.format(name=endpoint),
                                    texts.CONFIRM_ROLLBACK_TEXT.format(name=endpoint, lineage=serving),
                                    yes=texts.CONFIRM_ROLLBACK_YES, no=texts.CONFIRM_KEEP)
    return element


def launching_card(title: str) -> tuple[str, list[bk.Block]]:
    """What the card shows between the Launch click and the backend's answer."""
    body = [bk.header(title), bk.section(texts.CARD_LAUNCHING)]
    return bk.fallback(f"{title}: {texts.CARD_LAUNCHING}"), body


def refused_card(title: str, reason: str) -> tuple[str, list[bk.Block]]:
    text = texts.REFUSED_CARD.format(reason=reason)
    return bk.fallback(text), [bk.header(title), bk.section(text)]


# ---------------------------------------------------------------- /jobs and /job


def jobs_list(lineages: Sequence[Lineage], *, shown: int = 40) -> tuple[str, list[bk.Block]]:
    if not lineages:
        return texts.JOBS_EMPTY, [bk.section(texts.JOBS_EMPTY)]
    body: list[bk.Block] = [bk.header(texts.JOBS_TITLE.format(count=len(lineages)))]
    for lineage in lineages[:shown]:
        spec = lineage.spec
        body.append(bk.section(texts.JOBS_LINE.format(
            lineage=lineage.id, status=status_word(lineage.status.value), model=bk.escape(spec.model_label),
            count=spec.instance_count, instance=spec.instance_type, spot=" spot" if spec.spot else "",
            estimate=usd(lineage.estimated_usd), user=lineage.launched_by)))
    if len(lineages) > shown:
        body.append(bk.context(texts.JOBS_MORE.format(count=len(lineages) - shown)))
    text = texts.JOBS_TITLE.format(count=len(lineages))
    return text, bk.message(body, cut_note=texts.BLOCKS_CUT)


def job_detail(lineage: Lineage, *, forecast: Forecast | None = None,
               live: LiveProgress | None = None) -> tuple[str, list[bk.Block]]:
    text, body = launch_card(lineage, forecast=forecast, live=live)
    buttons = body.pop() if body and body[-1].get("type") == "actions" else None
    lines = [texts.JOB_ATTEMPT_LINE.format(
        job=a.job_name, status=a.status.value,
        secondary=f" ({a.secondary_status})" if a.secondary_status else "",
        reason=f": {bk.escape(a.failure_reason)}" if a.failure_reason else "",
        instance=a.instance_type, market="spot" if a.spot else "on-demand", change=attempt_change(a, lineage),
    ) for a in lineage.attempts]
    if lines:
        body.append(bk.section(f"*{texts.JOB_ATTEMPTS}*\n" + "\n".join(lines)))
    body += bk.fields(spec_pairs(lineage.spec))
    if buttons is not None:
        body.append(buttons)
    return text, bk.message(body, cut_note=texts.BLOCKS_CUT)


# ---------------------------------------------------------------- notifications


def report_blocks(lineage_id: str, report: dict[str, Any], summary: str) -> list[bk.Block]:
    """The final report (jobs.reporting.reports.JobReport JSON) as a summary: the task's metrics, the forecast
    next to what it took, cost and savings, links; the trainer's internals last, in small print."""
    body: list[bk.Block] = [bk.header(texts.REPORT_TITLE.format(lineage=lineage_id)), bk.section(bk.escape(summary))]
    headline = report.get("headline") or {}
    # A team's own script has no task headline: its metrics lead, as they came.
    leading = headline if isinstance(headline, dict) and headline else report.get("metrics") or {}
    if isinstance(leading, dict) and leading:
        body.append(bk.section(f"*{texts.REPORT_METRICS}*"))
        body += bk.fields(list((bk.escape(str(k)), _number(v)) for k, v in leading.items())[: 2 * bk.MAX_FIELDS])
    pairs = _cost_pairs(report)
    if report.get("forecast_vs_actual"):
        pairs.insert(0, (texts.REPORT_FORECAST, bk.escape(str(report["forecast_vs_actual"]))))
    body += bk.fields(pairs)
    links = report.get("links") or {}
    if isinstance(links, dict) and links:
        lines = "\n".join(link(str(k), str(v)) for k, v in links.items())
        body.append(bk.section(f"*{texts.REPORT_LINKS}*\n{lines}"))
    details = report.get("details")
    if details is None:  # a report from before the split: everything not in the headline
        details = {k: v for k, v in (report.get("metrics") or {}).items() if k not in headline}
    if isinstance(details, dict) and details:
        words = ", ".join(f"{bk.escape(str(k))} {_number(v)}" for k, v in details.items())
        body.append(bk.context(texts.REPORT_DETAILS.format(details=words)))
    return bk.message(body, cut_note=texts.BLOCKS_CUT)


def _cost_pairs(report: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    if report.get("code"):
        pairs.append((texts.REPORT_CODE, bk.escape(str(report["code"]))))
    if isinstance(report.get("cost_usd"), int | float):
        cost = usd(float(report["cost_usd"]))  # a local run's summary above says it is free here, once
        on_demand = report.get("on_demand_usd")
        if isinstance(on_demand, int | float) and report.get("spot_savings"):
            cost += f" (on demand: {usd(float(on_demand))})"
        pairs.append((texts.REPORT_COST, cost))
    if report.get("spot_savings"):
        pairs.append((texts.REPORT_SAVINGS, bk.escape(str(report["spot_savings"]))))
    seconds = report.get("training_seconds")
    if isinstance(seconds, int | float) and seconds:
        pairs.append((texts.REPORT_DURATION, duration(int(seconds))))
    attempts = report.get("attempts")
    if isinstance(attempts, list) and len(attempts) > 1:
        pairs.append((texts.REPORT_ATTEMPTS, str(len(attempts))))
        resumes = [_resume_words(a) for a in attempts if isinstance(a, dict) and a.get("resumed_from_step")]
        if resumes:
            pairs.append((texts.REPORT_RESUMED, "; ".join(resumes)))
    return pairs


def _resume_words(attempt: dict[str, Any]) -> str:
    redone = attempt.get("steps_redone")
    lost = f"{counted(redone, 'step')} redone" if isinstance(redone, int) else "later steps redone"
    return texts.REPORT_RESUMED_VALUE.format(number=attempt.get("number"), step=attempt["resumed_from_step"], lost=lost)


def link(label: str, target: str) -> str:
    if target.startswith(("http://", "https://")):
        return f"<{target}|{bk.escape(label)}>"
    return f"{bk.escape(label)}: `{bk.escape(target)}`"


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return bk.escape(str(value))


def mention(user: str) -> str:
    return f"<@{user}>" if user and user[0] in "UW" else bk.escape(user or "-")


def duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0 and seconds < 3 * 3600:
        return f"{seconds // 60} min"
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{seconds} s"
