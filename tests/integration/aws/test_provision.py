"""``provision`` (``ferryman migrate`` on aws://) against the emulator: what it makes."""

from __future__ import annotations

import json

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.layout import TTL_ATTRIBUTE
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import provision, queue_url


async def test_makes_the_table_queues_and_redrive_then_finds_them_existing(
    aws_env: dict[str, str],
) -> None:
    from aws_emulator import fresh_name

    location = parse_aws_url(f"aws://{fresh_name()}")
    async with open_clients() as clients:
        first = await provision(clients, location, max_receives=7, bucket=location.name)
        again = await provision(clients, location, max_receives=7, bucket=location.name)
        ttl = await clients.dynamodb.describe_time_to_live(TableName=location.table)
        url = await queue_url(clients, location.queue)
        assert url is not None
        attributes = (await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))[
            "Attributes"
        ]
    assert first.created == [
        f"table {location.table}",
        f"queue {location.dlq.name}",
        f"queue {location.queue.name}",
        f"bucket {location.name}",
    ]
    assert again.created == []
    assert len(again.existing) == 4
    assert ttl["TimeToLiveDescription"]["AttributeName"] == TTL_ATTRIBUTE
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["maxReceiveCount"] == 7
    assert redrive["deadLetterTargetArn"].endswith(location.dlq.name)
