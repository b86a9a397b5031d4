"""The AWS engine (``aws://NAME``): DynamoDB jobs, SQS queue and DLQ, S3 or DynamoDB results.

Every call goes through aiobotocore (adapters/aws/clients.py), never blocking the
event loop. docs/aws.md says how to deploy it and which settings must agree.
"""
