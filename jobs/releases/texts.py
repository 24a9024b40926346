"""The one line a schedule's channel hears about a completed run and the schedule's endpoint."""

from __future__ import annotations

RELEASE = "release"  # outbox kind: that line, with a Promote or Rollback button

PROMOTED = ":rocket: Schedule {schedule}: {lineage} beat {previous} ({changes}), so it is being promoted into " \
           "{endpoint} in place (it served {current}); the job's thread says when it serves."
REFUSED = ":warning: Schedule {schedule}: {lineage} beat {previous} ({changes}) but was not promoted into " \
          "{endpoint}: {reason}"
REGRESSED = ":chart_with_downwards_trend: Schedule {schedule}: {lineage} regressed against {previous} " \
            "({changes}), so it was not promoted: {endpoint} keeps serving {current}."
BETTER = ":chart_with_upwards_trend: Schedule {schedule}: {lineage} beat {previous} ({changes}); with " \
         "deploy_if_better off, {endpoint} keeps serving {current} until someone promotes it."
NOT_BETTER = ":heavy_minus_sign: Schedule {schedule}: {lineage} did not beat {previous} ({changes}): " \
             "{endpoint} keeps serving {current}."
FIRST = ":new: Schedule {schedule}: {lineage} has no earlier run to compare with: {endpoint} keeps serving " \
        "{current}."
#: The line's ending when the schedule's endpoint does not exist (yet), instead of what it serves.
NO_ENDPOINT = ":information_source: Schedule {schedule}: {lineage} completed ({verdict}), but {endpoint} does not " \
              "exist yet: /deploy {lineage} name={endpoint} makes it."
VERDICT_WORDS = {"first": "its first run", "promote": "better than {previous}", "better": "better than {previous}",
                 "regressed": "it regressed against {previous}", "not_better": "not better than {previous}"}
NO_CHANGES = "no metric in common"
