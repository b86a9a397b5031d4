"""FERRYMAN_RESULTS_URL=s3://BUCKET/PREFIX: what is taken, and how each bad URL is named."""

from __future__ import annotations

import pytest

from ferryman.adapters.aws.bucket import BucketLocation
from ferryman.engines import InvalidUrlError
from ferryman.result_stores import results_bucket, results_directory


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://my-bucket", "my-bucket", ""),
        ("s3://my-bucket/", "my-bucket", ""),
        ("s3://my-bucket/results", "my-bucket", "results"),
        ("s3://my-bucket/results/v1/", "my-bucket", "results/v1"),
        ("s3://a.b-c/x", "a.b-c", "x"),
        ("s3://abc/with%20space", "abc", "with space"),
    ],
)
def test_an_s3_url_names_its_bucket_and_prefix(url: str, bucket: str, prefix: str) -> None:
    assert results_bucket(url) == BucketLocation(bucket=bucket, prefix=prefix)
    # Not a directory: results_directory takes it and says so.
    assert results_directory(url) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://", "a BUCKET is needed"),
        ("s3:///prefix", "a BUCKET is needed"),
        ("s3://ab", "must be 3-63 lowercase letters"),
        ("s3://My-Bucket/x", "must be 3-63 lowercase letters"),
        ("s3://under_score", "must be 3-63 lowercase letters"),
        ("s3://-dash-first", "must be 3-63 lowercase letters"),
        ("s3://" + "a" * 64, "must be 3-63 lowercase letters"),
        ("s3://two..dots", "cannot have '..'"),
        ("s3://dot.-dash", "cannot have '..', '.-' or '-.'"),
        ("s3://192.168.5.4", "cannot be an IP address"),
        ("s3://xn--bucket", "reserves"),
        ("s3://bucket-s3alias", "reserves"),
        ("s3://bucket/a//b", "cannot have empty, '.' or '..' parts"),
        ("s3://bucket/a/../b", "cannot have empty, '.' or '..' parts"),
        ("s3://bucket/a%0Ab", "control character"),
        ("s3://bucket/" + "p" * 600, "over 512 bytes"),
        ("s3://bucket/p?region=eu-west-1", "nothing more"),
        ("s3://bucket/p#frag", "nothing more"),
    ],
)
def test_a_bad_s3_url_is_named_as_the_results_url(url: str, expected: str) -> None:
    with pytest.raises(InvalidUrlError) as raised:
        results_bucket(url)
    assert raised.value.message.startswith("FERRYMAN_RESULTS_URL: ")
    assert expected in raised.value.message
    with pytest.raises(InvalidUrlError):
        results_directory(url)


def test_credentials_in_an_s3_url_are_refused_and_never_shown() -> None:
    with pytest.raises(InvalidUrlError) as raised:
        results_bucket("s3://AKIAEXAMPLE:s3cr3t@bucket/p")
    assert "s3cr3t" not in raised.value.message
    assert "configuration chain" in raised.value.message


def test_other_urls_are_not_buckets() -> None:
    assert results_bucket("file://./results") is None
    assert results_bucket("db") is None
