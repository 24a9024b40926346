"""A moto server on loopback for the benchmarks, with the environment pointed at it (no real AWS)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
from typing import Any

BUCKET = "bench-bucket"
ROLE_NAME = "bench"
ROLE_ARN = f"arn:aws:iam::123456789012:role/{ROLE_NAME}"
_TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                  "Principal": {"Service": "sagemaker.amazonaws.com"}}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> Any:
    """The running ThreadedMotoServer (stop it when done), with the bench bucket and role created."""
    from moto.server import ThreadedMotoServer

    # The SDK's config logger prints INFO lines to stdout on every estimator; keep the figures readable.
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        SAGEMAKER_SUPPRESS_V2_WARNING="1",
    )
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    boto3.client("iam").create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_TRUST))
    return server


def spot_job_request(name: str, *, role_arn: str = ROLE_ARN, max_run: int = 1000, max_wait: int = 3600) -> dict[str, Any]:
    """A CreateTrainingJob request for a managed-spot job on one ml.p3.2xlarge (what the benchmarks arrange)."""
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "bench:latest", "TrainingInputMode": "File"},
        "RoleArn": role_arn,
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/{name}/output"},
        "ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": max_run, "MaxWaitTimeInSeconds": max_wait},
        "EnableManagedSpotTraining": True,
    }


def quiet_libraries(*more: str) -> None:
    """Keep the figures readable: the server's, the SDK's and the bot's INFO lines off."""
    for noisy in ("werkzeug", "sagemaker", "botocore", "jobs", *more):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def jobs_parser(doc: str | None) -> argparse.ArgumentParser:
    """The benchmarks' command line: ``--jobs N`` (default 1000) running jobs to arrange."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--jobs", type=int, default=1000)
    return parser
