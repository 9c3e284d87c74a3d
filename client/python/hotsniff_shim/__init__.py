"""hotsniff client shim for redis-py: serves hot keys from local memory.

    import redis, hotsniff_shim
    r = redis.Redis(host="cache-1", port=6379)
    shim = hotsniff_shim.install(r, channel_client=redis.Redis(host="events"))
    ...
    shim.close()

See docs/client-shim.md in the hotsniff repository.
"""

from .events import Event, decode_message, decode_snapshot
from .shim import Shim, install
from .subscriber import DEFAULT_CHANNEL, Subscriber

__all__ = ["install", "Shim", "Subscriber", "Event", "decode_message", "decode_snapshot", "DEFAULT_CHANNEL"]
