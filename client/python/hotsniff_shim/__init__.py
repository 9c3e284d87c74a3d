"""hotsniff client shim for redis-py: serves hot keys from local memory.

    import redis, hotsniff_shim
    r = redis.Redis(host="cache-1", port=6379)
    shim = hotsniff_shim.install(r, channel_client=redis.Redis(host="events"))
    ...
    shim.close()

``install`` takes a redis.Redis (pooled or single-connection), a
redis.asyncio.Redis or a redis.cluster.RedisCluster. The package is split by
concern: events.py (channel messages), subscriber.py (following the
channel), cache.py (the local cache), dbtrack.py (which DB each connection
is on), sync.py, asyncio_adapter.py and cluster.py (one adapter per kind of
client), shim.py (install). conformance_adapter.py is the process the
cross-shim conformance suite drives; it is not part of the API.

See docs/client-shim.md in the hotsniff repository.
"""

from .events import DecodeError, Event, decode_message, decode_snapshot
from .shim import SUPPORTED, Shim, UnsupportedClient, install
from .subscriber import DEFAULT_CHANNEL, Subscriber

__all__ = ["install", "Shim", "UnsupportedClient", "SUPPORTED", "Subscriber", "Event", "DecodeError",
           "decode_message", "decode_snapshot", "DEFAULT_CHANNEL"]
