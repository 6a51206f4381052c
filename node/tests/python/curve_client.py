"""A libzmq CURVE client (pyzmq) against a CURVE-enabled zper node (issue #19).

Usage: curve_client.py WRITER READER SERVER_PUBLIC CLIENT_PUBLIC CLIENT_SECRET
                       STRANGER_PUBLIC STRANGER_SECRET TOPIC

Keys are Z85 text. Prints one line per step; the Rust test (tests/curve_interop.rs) checks them
and the segment on disk. Exit codes: 2 no ack, 3 bad reader reply, 4 a refused client got an
answer. The protocol is ZPER's (spec zper.md §4 writer, §5 reader): identity
[hash][mode][tlen][topic][uuid16], messages [id][body], OFFSET/FETCH with 8-byte big-endian
numbers, replies [status][data] with status 100 for success.
"""
import struct
import sys
import time
import uuid

import zmq

(writer, reader, server_pub, client_pub, client_sec, stranger_pub, stranger_sec,
 topic) = sys.argv[1:9]
ctx = zmq.Context()
TIMEOUT_MS = 10_000


def java_hash(s):
    h = 0
    for c in s:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h & 0xFF


def identity(mode):
    t = topic.encode()
    return bytes([java_hash(topic), mode, len(t)]) + t + uuid.uuid4().bytes


def sock(endpoint, mode, keys=None, timeout=TIMEOUT_MS):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, identity(mode))
    s.linger = 0
    s.rcvtimeo = timeout
    if keys is not None:
        pub, sec = keys
        s.curve_serverkey = server_pub.encode()
        s.curve_publickey = pub.encode()
        s.curve_secretkey = sec.encode()
    s.connect(endpoint)
    return s


def fail(code, why):
    print("ERROR: " + why, file=sys.stderr, flush=True)
    sys.exit(code)


def request(s, *frames):
    s.send_multipart(list(frames))
    try:
        return s.recv_multipart()
    except zmq.Again:
        fail(3, "no reader reply within %d ms" % TIMEOUT_MS)


def fetch_all(s, want):
    """FETCHes from the earliest offset until `want` whole messages arrived (10 s)."""
    r = request(s, b"OFFSET", struct.pack(">q", -2))
    if len(r) != 2 or r[0] != b"\x64":
        fail(3, "bad OFFSET reply %r" % r)
    offset = struct.unpack(">q", r[1])[0]
    messages = []
    deadline = time.time() + 10
    while len(messages) < want:
        if time.time() > deadline:
            fail(3, "read %d of %d messages" % (len(messages), want))
        r = request(s, b"FETCH", struct.pack(">q", offset), struct.pack(">q", 65536))
        if len(r) != 2 or r[0] != b"\x64":
            fail(3, "bad FETCH reply %r" % r)
        data, at, frames, used = r[1], 0, [], 0
        while at + 2 <= len(data):
            flags = data[at]
            if flags & 2:
                if at + 9 > len(data):
                    break
                n = struct.unpack(">q", data[at + 1:at + 9])[0]
                head = 9
            else:
                n, head = data[at + 1], 2
            if at + head + n > len(data):
                break
            frames.append(data[at + head:at + head + n].decode())
            at += head + n
            if not flags & 1:
                messages.append("|".join(frames))
                frames, used = [], at
        offset += used
        if used == 0:
            time.sleep(0.02)
    return messages


def produce(keys, ids):
    """Mode 1 (ack per message on the writer connection); waits for the last id's ack."""
    w = sock(writer, 1, keys)
    for i in ids:
        w.send_multipart([i.encode(), ("body-" + i).encode()])
    while True:
        try:
            ack = w.recv_multipart()
        except zmq.Again:
            fail(2, "no mode-1 ack for %s within %d ms" % (ids[-1], TIMEOUT_MS))
        if ack == [ids[-1].encode()]:
            break
    w.close()


def refused(endpoint, keys, what):
    """A client the node must refuse: its request gets no answer (1.5 s)."""
    s = sock(endpoint, 1, keys, timeout=1500)
    if endpoint == writer:
        s.send_multipart([b"x-" + what.encode(), b"must not be stored"])
    else:
        s.send_multipart([b"OFFSET", struct.pack(">q", -2)])
    try:
        got = s.recv_multipart()
        fail(4, "%s got an answer: %r" % (what, got))
    except zmq.Again:
        print("REFUSED " + what, flush=True)
    s.close()


client = (client_pub, client_sec)
produce(client, ["c-0", "c-1", "c-2"])
print("ACKED c-2", flush=True)
r = sock(reader, 0, client)
for m in fetch_all(r, 3):
    print("MSG " + m, flush=True)
refused(writer, (stranger_pub, stranger_sec), "stranger-writer")
refused(reader, (stranger_pub, stranger_sec), "stranger-reader")
refused(writer, None, "plain-writer")
refused(reader, None, "plain-reader")
# The node kept serving the authorised client: one more message, read back.
produce(client, ["c-3"])
print("DONE %d" % len(fetch_all(r, 4)), flush=True)
r.close()
ctx.term()
