import socket, sys, time
# Trickles a request header one byte per `gap` seconds; reports how long the server kept reading.
# Usage: slowloris.py PORT GAP_SECONDS
port, gap = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
req = b"GET /events HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n\r\n"
t0 = time.time()
for i, b in enumerate(req[:-2]):
    try:
        s.send(bytes([b])); time.sleep(gap)
        s.settimeout(0.001)
        try:
            if s.recv(100) == b"": print(f"closed after {time.time()-t0:.1f}s ({i+1} bytes)"); sys.exit()
        except socket.timeout: pass
    except OSError as e:
        print(f"error {e} after {time.time()-t0:.1f}s"); sys.exit()
    if time.time() - t0 > 25: print(f"still open after {time.time()-t0:.1f}s ({i+1} bytes)"); sys.exit()
