"""One log-service client in a process of its own, appending in lockstep, for bench_wire_floor.py:

    python bench/append_clients.py ADDRESS PAYLOAD_BYTES

It connects (and appends once), prints "ready", then for each line "run SECONDS T0" on stdin waits
until the wall clock reaches T0, appends until T0 + SECONDS, and prints "done APPENDS CPU_SECONDS".
"quit" ends it. Every process of a run is started and connected before its clock starts.
"""
import sys
import time


def main() -> None:
    from logtide import connect_logservice
    address, size = sys.argv[1], int(sys.argv[2])
    payload = b"\xa5" * size
    client = connect_logservice(address)
    client.append(payload)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        seconds, t0 = float(cmd[1]), float(cmd[2])
        time.sleep(max(0.0, t0 - time.time()))
        end, n, c0 = t0 + seconds, 0, time.process_time()
        while time.time() < end:
            client.append(payload)
            n += 1
        print(f"done {n} {time.process_time() - c0}", flush=True)
    client.close()


if __name__ == "__main__":
    main()
