"""The floor under every Python echo server on this machine, for bench_wire_floor.py: a bare
uvloop `asyncio.Protocol` that returns each length-prefixed frame as it came (no CRC, no call
ids, no dispatch), the design issue 24 measured at 5.8 us of server CPU per message. Its clients
(bench/echo_clients.py "bare") are blocking sockets, the lightest Python client there is. What
it spends per message is what the kernel's loopback TCP and uvloop cost here, with nothing of
logtide's on top. Run as

    python bench/bare_echo_server.py

prints "serving on 127.0.0.1:PORT" and serves until SIGTERM.
"""
import asyncio
import signal
import struct

import uvloop

_LEN = struct.Struct("<I")


class BareEcho(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        self.tr = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        end = 0
        while len(buf) - end >= 4:
            n = _LEN.unpack_from(buf, end)[0]
            if len(buf) - end < 4 + n:
                break
            end += 4 + n
        if end:
            self.tr.write(buf[:end])    # the whole frames read, as one write
        self.buf = buf[end:]


async def main() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(BareEcho, "127.0.0.1", 0)
    print(f"serving on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    uvloop.run(main())
