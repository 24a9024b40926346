"""The moto fixtures (a loopback AWS) for the backend tests; see tests/support/moto_server.py."""

from tests.support.moto_server import captured_create_requests, moto_aws, moto_aws_module, moto_server

__all__ = ["captured_create_requests", "moto_aws", "moto_aws_module", "moto_server"]
