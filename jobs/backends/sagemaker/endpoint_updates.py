"""The requests of an update in place, as SageMaker takes them: the new endpoint config, UpdateEndpoint with
a blue/green deployment (a canary step, or all at once, with automatic rollback on a CloudWatch alarm),
and that alarm on the endpoint's 5xx errors. Pure functions: the backend sends what they return.
"""

from __future__ import annotations

from typing import Any

from jobs.endpoints.port import DeployRequest, Rollout, UpdateRequest

VARIANT = "AllTraffic"  # the SDK's variant name for a single-model endpoint
#: The longest a blue/green update may take before SageMaker gives up and keeps the old fleet.
MAX_EXECUTION_SECONDS = 3600
ALARM_NAMESPACE = "AWS/SageMaker"
ALARM_METRIC = "Invocation5XXErrors"
ALARM_PERIOD_SECONDS = 60
#: Every model, endpoint config, endpoint and alarm the bot makes carries this tag (the endpoint's name), as its
#: training jobs carry ``trainbot:lineage``: iam-policy.json lets the bot update, delete and invoke only what
#: carries it, so the bot cannot touch an endpoint of the account it did not make.
ENDPOINT_TAG = "trainbot:endpoint"


def endpoint_tags(endpoint: str) -> list[dict[str, str]]:
    return [{"Key": ENDPOINT_TAG, "Value": endpoint}]


def endpoint_config_arguments(config_name: str, model: DeployRequest, *, endpoint: str) -> dict[str, Any]:
    """CreateEndpointConfig: one variant serving ``model`` on its instances (or serverless), tagged for
    ``endpoint``."""
    variant: dict[str, Any] = {"VariantName": VARIANT, "ModelName": model.model_name, "InitialVariantWeight": 1.0}
    if model.serverless:
        variant["ServerlessConfig"] = {"MemorySizeInMB": model.memory_mb, "MaxConcurrency": model.max_concurrency}
    else:
        variant.update(InstanceType=model.instance_type, InitialInstanceCount=model.instance_count)
    return {"EndpointConfigName": config_name, "ProductionVariants": [variant], "Tags": endpoint_tags(endpoint)}


def update_endpoint_arguments(update: UpdateRequest, *, serverless: bool) -> dict[str, Any]:
    """UpdateEndpoint in place; blue/green unless the endpoint is serverless (SageMaker has no deployment
    configuration for those: the new config takes over as one)."""
    arguments: dict[str, Any] = {"EndpointName": update.endpoint, "EndpointConfigName": update.config_name,
                                 "RetainAllVariantProperties": False}
    if not serverless:
        arguments["DeploymentConfig"] = deployment_config(update.rollout)
    return arguments


def deployment_config(rollout: Rollout) -> dict[str, Any]:
    if rollout.canary_percent:
        routing: dict[str, Any] = {
            "Type": "CANARY",
            "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": rollout.canary_percent},
            "WaitIntervalInSeconds": rollout.wait_seconds,
        }
    else:
        routing = {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 0}
    config: dict[str, Any] = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": routing,
            # The old fleet stays this long after the shift, so an alarm can still send traffic back to it.
            "TerminationWaitInSeconds": rollout.wait_seconds,
            "MaximumExecutionTimeoutInSeconds": MAX_EXECUTION_SECONDS,
        }
    }
    if rollout.alarm:
        config["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": rollout.alarm}]}
    return config


def alarm_arguments(endpoint: str, alarm: str) -> dict[str, Any]:
    """PutMetricAlarm: any 5xx answer of the endpoint within a minute puts the alarm in ALARM."""
    return {
        "AlarmName": alarm,
        "AlarmDescription": f"trainbot: 5xx errors of endpoint {endpoint}; rolls back its blue/green updates.",
        "Namespace": ALARM_NAMESPACE,
        "MetricName": ALARM_METRIC,
        "Dimensions": alarm_dimensions(endpoint),
        "Statistic": "Sum",
        "Period": ALARM_PERIOD_SECONDS,
        "EvaluationPeriods": 1,
        "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "notBreaching",
        "Tags": endpoint_tags(endpoint),
    }


def alarm_dimensions(endpoint: str) -> list[dict[str, str]]:
    return [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": VARIANT}]


def alarm_watches(existing: dict[str, Any], endpoint: str) -> bool:
    """Whether an alarm that exists already watches this endpoint's 5xx errors (the bot may then keep it)."""
    dimensions = sorted((d.get("Name"), d.get("Value")) for d in existing.get("Dimensions") or [])
    wanted = sorted((d["Name"], d["Value"]) for d in alarm_dimensions(endpoint))
    return existing.get("MetricName") == ALARM_METRIC and existing.get("Namespace") == ALARM_NAMESPACE \
        and dimensions == wanted
