"""Where the AWS engine's region comes from: the standard chain, AWS_REGION included."""

from __future__ import annotations

import os

import pytest

from ferryman.adapters.aws.clients import AwsConfigurationError, configured_region


@pytest.fixture
def no_aws_configuration(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return monkeypatch


def test_aws_region_alone_names_the_region(no_aws_configuration: pytest.MonkeyPatch) -> None:
    # What Lambda and ECS set; botocore itself reads only AWS_DEFAULT_REGION.
    no_aws_configuration.setenv("AWS_REGION", "eu-west-1")
    assert configured_region() == "eu-west-1"


def test_aws_default_region_comes_first(no_aws_configuration: pytest.MonkeyPatch) -> None:
    no_aws_configuration.setenv("AWS_REGION", "eu-west-1")
    no_aws_configuration.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert configured_region() == "us-east-2"


def test_no_region_says_which_variables_name_one(no_aws_configuration: pytest.MonkeyPatch) -> None:
    with pytest.raises(AwsConfigurationError, match="set AWS_REGION"):
        configured_region()
