"""TLS and AK/SK credentials from the environment (`ClientConfig.from_env`): ROCKETMQ_ENDPOINTS,
ROCKETMQ_TLS=1, ROCKETMQ_TLS_CA_FILE (the server certificate's CA; without it the system roots),
ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY (requests are signed, MQv2-HMAC-SHA1). Keeping the secret
in the environment keeps it out of the source and of `ps`.

Try it against the embedded server:
    THRUST_SECRET_KEY=sk thrust serve --auto-create --tls-cert cert.pem --tls-key key.pem --access-key ak
    ROCKETMQ_ENDPOINTS=127.0.0.1:8081 ROCKETMQ_TLS=1 ROCKETMQ_TLS_CA_FILE=cert.pem \\
        ROCKETMQ_ACCESS_KEY=ak ROCKETMQ_SECRET_KEY=sk python examples/tls_credentials.py
"""

import asyncio
import os

import thrust

TOPIC = os.environ.get("TOPIC", "orders")


async def main() -> None:
    config = thrust.ClientConfig.from_env()
    print("connecting with", config)  # the secret is never printed
    async with thrust.Producer(config, topics=[TOPIC]) as producer:
        receipt = await producer.send(thrust.Message(topic=TOPIC, body=b"over TLS, signed"))
    print("sent", receipt.message_id)


asyncio.run(main())
