"""``ferryman migrate`` on an ``aws://`` URL: make what is missing, name what disagrees.

Makes the table, the queue and its DLQ and, when FERRYMAN_RESULTS_URL is
``s3://BUCKET/PREFIX``, the bucket (adapters/aws/provision.py), with the redrive
policy's ``maxReceiveCount`` = FERRYMAN_MAX_RECEIVES. What exists is read and
checked, never changed: each attribute that disagrees is printed with the value it
should have, and the command exits 1, so a deploy script stops before workers run
against a setup that breaks a guarantee. Says on stderr what it made and found.

It runs before (and without) the engine being opened: migrating is provisioning
here, there is no schema to upgrade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from ferryman.cli.common import err_console, fail
from ferryman.engines import InvalidUrlError
from ferryman.result_stores import results_bucket

if TYPE_CHECKING:
    from ferryman.adapters.aws.provision import ProvisionReport
    from ferryman.config import Settings

SCHEME = "aws://"


def is_aws(database_url: str) -> bool:
    return database_url.startswith(SCHEME)


async def migrate_aws(s: Settings) -> None:
    """Provision what ``s`` names; exit 1 when something that exists disagrees."""
    from botocore.exceptions import BotoCoreError, ClientError

    from ferryman.adapters.aws.clients import open_clients
    from ferryman.adapters.aws.errors import describe
    from ferryman.adapters.aws.location import AwsUrlError, parse_aws_url
    from ferryman.adapters.aws.provision import provision
    from ferryman.core.errors import FerrymanError

    try:
        location = parse_aws_url(s.database_url)
    except AwsUrlError as exc:
        raise InvalidUrlError(f"FERRYMAN_DATABASE_URL: {exc}") from None
    bucket = results_bucket(s.results_url)
    try:
        async with open_clients() as clients:
            report = await provision(
                clients,
                location,
                max_receives=s.retries.max_receives,
                bucket=None if bucket is None else bucket.bucket,
            )
    except FerrymanError as exc:
        fail(f"{location.shown()}: {exc.message}")
    except (ClientError, BotoCoreError) as exc:
        # A refusal (AccessDenied, a quota): AWS's own message names what and why.
        fail(f"{location.shown()}: {describe(exc, 'aws')}")
    _say(report)


def _say(report: ProvisionReport) -> None:
    for made in report.created:
        err_console.print(f"created the {made}", highlight=False)
    for found in report.existing:
        err_console.print(f"found the {found}", highlight=False)
    for line in report.disagreements:
        err_console.print(Text.assemble(("disagrees: ", "bold red"), line), highlight=False)
    if report.disagreements:
        count = len(report.disagreements)
        fail(
            f"{count} setting{'s' if count > 1 else ''} of what exists disagree"
            f"{'' if count > 1 else 's'} with what ferryman needs; migrate changes nothing "
            "that exists: fix each as named above, then run migrate again"
        )
