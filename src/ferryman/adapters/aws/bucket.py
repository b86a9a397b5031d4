"""Where an ``s3://BUCKET/PREFIX`` results URL puts results: a bucket and a key prefix.

The bucket name is checked against the S3 rules for general purpose buckets before
any call, so a mistyped URL is named at start, not at the first result. The prefix is
optional (``s3://BUCKET`` keeps results at the bucket's top); its slashes at either
end are dropped, so ``s3://b/p`` and ``s3://b/p/`` are the same place. Region,
credentials and endpoint are never in the URL: they come from the AWS configuration
chain, as for ``aws://``.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ferryman.adapters.aws.location import AwsUrlError

SCHEME = "s3://"
# S3's rules: 3-63 lowercase letters, digits, '.' and '-', a letter or digit at each end.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP_ADDRESS = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
# Names S3 reserves for other kinds of buckets (access points, directory buckets...).
_RESERVED_STARTS = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_ENDS = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# An object key is at most 1024 bytes; a result key needs room after the prefix.
MAX_PREFIX_BYTES = 512


@dataclass(frozen=True, slots=True)
class BucketLocation:
    bucket: str
    # Without a slash at either end; "" for the bucket's top.
    prefix: str

    def shown(self) -> str:
        """For people: the URL, normalised."""
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def check_bucket_name(bucket: str) -> None:
    """Raise AwsUrlError, naming the rule, unless ``bucket`` is a valid S3 bucket name."""
    if not _BUCKET.fullmatch(bucket):
        raise AwsUrlError(
            f"s3:// URL: bucket name {bucket!r} must be 3-63 lowercase letters, digits, "
            "'.' or '-', starting and ending with a letter or digit"
        )
    if ".." in bucket or ".-" in bucket or "-." in bucket:
        raise AwsUrlError(f"s3:// URL: bucket name {bucket!r} cannot have '..', '.-' or '-.' in it")
    if _IP_ADDRESS.fullmatch(bucket):
        raise AwsUrlError(f"s3:// URL: bucket name {bucket!r} cannot be an IP address")
    if bucket.startswith(_RESERVED_STARTS) or bucket.endswith(_RESERVED_ENDS):
        raise AwsUrlError(
            f"s3:// URL: bucket name {bucket!r} uses a prefix or suffix S3 reserves "
            f"({', '.join(_RESERVED_STARTS + _RESERVED_ENDS)})"
        )


def _check_prefix(prefix: str) -> None:
    if any(part in ("", ".", "..") for part in prefix.split("/")):
        raise AwsUrlError(f"s3:// URL: the prefix {prefix!r} cannot have empty, '.' or '..' parts")
    if "\\" in prefix or any(ord(c) < 32 or ord(c) == 127 for c in prefix):
        raise AwsUrlError("s3:// URL: the prefix cannot hold a backslash or a control character")
    if len(prefix.encode()) > MAX_PREFIX_BYTES:
        raise AwsUrlError(f"s3:// URL: the prefix is over {MAX_PREFIX_BYTES} bytes")


def parse_s3_url(url: str) -> BucketLocation:
    """The bucket and prefix ``url`` names; AwsUrlError (naming the part) when it
    cannot be used. Never echoes a part that may hold a credential."""
    if not url.startswith(SCHEME):
        raise AwsUrlError("not an s3:// URL")
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise AwsUrlError(
            "an s3:// results URL is s3://BUCKET or s3://BUCKET/PREFIX, nothing more: "
            "region, credentials and endpoint come from the AWS configuration chain"
        )
    bucket = parts.netloc
    if not bucket:
        raise AwsUrlError("s3:// URL: a BUCKET is needed (s3://BUCKET/PREFIX)")
    check_bucket_name(bucket)
    prefix = urllib.parse.unquote(parts.path).strip("/")
    if prefix:
        _check_prefix(prefix)
    return BucketLocation(bucket=bucket, prefix=prefix)
