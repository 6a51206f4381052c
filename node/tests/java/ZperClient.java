import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.UUID;

import org.zeromq.ZMQ;

/**
 * ZPER interop client on JeroMQ 0.3.x (used by node/tests/jeromq_interop.rs).
 *
 * Usage: ZperClient writerEndpoint readerEndpoint topic
 *
 * Produces 3 messages in each ack mode (0: DEALER, no reply; 1: DEALER, per-flush acks; 2: REQ,
 * one reply per message), then reads the topic back through the reader and prints one
 * "MSG frame1|frame2" line per stored message and "DONE count". Exit codes: 2 no mode-1 ack,
 * 3 bad mode-2 reply, 4 bad reader reply or reader timeout.
 */
public class ZperClient {
    static final int TIMEOUT_MS = 10_000;

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static String str(byte[] b) {
        return new String(b, StandardCharsets.US_ASCII);
    }

    static byte[] be(long value) {
        return ByteBuffer.allocate(8).putLong(value).array();
    }

    static void fail(int code, String why) {
        System.err.println("ERROR: " + why);
        System.exit(code);
    }

    /** [hash:1][mode:1][tlen:1][topic][uuid:16], hash = low byte of String.hashCode(). */
    static byte[] identity(String topic, int mode) {
        byte[] t = ascii(topic);
        UUID u = UUID.randomUUID();
        return ByteBuffer.allocate(3 + t.length + 16)
                .put((byte) topic.hashCode()).put((byte) mode).put((byte) t.length).put(t)
                .putLong(u.getMostSignificantBits()).putLong(u.getLeastSignificantBits())
                .array();
    }

    static ZMQ.Socket socket(ZMQ.Context ctx, int type, String topic, int mode, String endpoint) {
        ZMQ.Socket s = ctx.socket(type);
        s.setIdentity(identity(topic, mode));
        s.setLinger(1000);
        s.setReceiveTimeOut(TIMEOUT_MS);
        s.connect(endpoint);
        return s;
    }

    static void send(ZMQ.Socket s, byte[]... frames) {
        for (int i = 0; i < frames.length; i++) {
            s.send(frames[i], i + 1 < frames.length ? ZMQ.SNDMORE : 0);
        }
    }

    /** Frames as hex, for error messages. */
    static String describe(byte[][] frames) {
        StringBuilder out = new StringBuilder();
        for (byte[] f : frames) {
            out.append('[');
            for (byte b : f) out.append(String.format("%02x", b & 0xff));
            out.append(']');
        }
        return out.toString();
    }

    /** One whole reply, or exit 4 on timeout; recv returns null when the timeout expires. */
    static byte[][] request(ZMQ.Socket s, byte[]... frames) {
        send(s, frames);
        byte[][] reply = new byte[0][];
        do {
            byte[] f = s.recv(0);
            if (f == null) fail(4, "no reader reply within " + TIMEOUT_MS + " ms");
            reply = Arrays.copyOf(reply, reply.length + 1);
            reply[reply.length - 1] = f;
        } while (s.hasReceiveMore());
        return reply;
    }

    /** Reads the topic through the reader, printing each complete stored message once. */
    static class Fetcher {
        final ZMQ.Socket reader;
        long offset;
        int count;

        Fetcher(ZMQ.Socket reader) {
            this.reader = reader;
            byte[][] r = request(reader, ascii("OFFSET"), be(-2)); // earliest
            if (r.length != 2 || r[0].length != 1 || r[0][0] != 100 || r[1].length != 8) {
                fail(4, "bad OFFSET reply: " + describe(r));
            }
            offset = ByteBuffer.wrap(r[1]).getLong();
        }

        /** FETCHes until an empty data frame. */
        void drain() {
            while (true) {
                byte[][] r = request(reader, ascii("FETCH"), be(offset), be(65536));
                if (r.length != 2 || r[0].length != 1 || r[0][0] != 100) {
                    fail(4, "bad FETCH reply at offset " + offset + ": " + describe(r));
                }
                if (r[1].length == 0) return;
                int used = parse(r[1]);
                if (used == 0) fail(4, "FETCH at " + offset + " held no complete message");
                offset += used;
            }
        }

        /** Prints the complete messages of data; returns their byte count. */
        int parse(byte[] data) {
            ByteBuffer b = ByteBuffer.wrap(data);
            int complete = 0;
            StringBuilder msg = new StringBuilder();
            while (b.remaining() >= 2) {
                int flags = b.get() & 0xff;
                if ((flags & ~3) != 0) fail(4, "invalid flags byte " + flags);
                if ((flags & 0x02) != 0 && b.remaining() < 8) break;
                long len = (flags & 0x02) != 0 ? b.getLong() : b.get() & 0xff;
                if (b.remaining() < len) break;
                byte[] payload = new byte[(int) len];
                b.get(payload);
                msg.append(msg.length() == 0 ? "" : "|").append(str(payload));
                if ((flags & 0x01) == 0) {
                    System.out.println("MSG " + msg);
                    msg.setLength(0);
                    count++;
                    complete = b.position();
                }
            }
            return complete;
        }

        /** Drains repeatedly (data may wait for a flush) until count reaches n; exit 4 after 10 s. */
        void awaitCount(int n) throws InterruptedException {
            long deadline = System.currentTimeMillis() + TIMEOUT_MS;
            for (drain(); count < n; drain()) {
                if (System.currentTimeMillis() > deadline) fail(4, "read " + count + " of " + n);
                Thread.sleep(20);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) fail(1, "usage: ZperClient writerEndpoint readerEndpoint topic");
        String writer = args[0], topic = args[2];
        ZMQ.Context ctx = ZMQ.context(1);
        Fetcher fetcher = new Fetcher(socket(ctx, ZMQ.DEALER, topic, 0, args[1]));

        // Mode 0: fire and forget. Each producer has its own connection and the ROUTER
        // fair-queues between them, so wait until these are readable before starting mode 1.
        ZMQ.Socket m0 = socket(ctx, ZMQ.DEALER, topic, 0, writer);
        for (int i = 0; i < 3; i++) send(m0, ascii("m0-" + i), ascii("body-m0-" + i));
        fetcher.awaitCount(3);
        m0.close();

        // Mode 1: one single-frame ack per flush, carrying the id of the newest message covered.
        ZMQ.Socket m1 = socket(ctx, ZMQ.DEALER, topic, 1, writer);
        for (int i = 0; i < 3; i++) send(m1, ascii("m1-" + i), ascii("body-m1-" + i));
        while (true) {
            byte[] ack = m1.recv(0);
            if (ack == null) fail(2, "no mode-1 ack for m1-2 within " + TIMEOUT_MS + " ms");
            if (m1.hasReceiveMore()) fail(2, "mode-1 ack has more than one frame");
            if (str(ack).equals("m1-2")) break;
        }
        m1.close();

        // Mode 2: REQ adds (and strips) the empty delimiter; the reply is the message id.
        ZMQ.Socket m2 = socket(ctx, ZMQ.REQ, topic, 2, writer);
        for (int i = 0; i < 3; i++) {
            String id = "m2-" + i;
            send(m2, ascii(id), ascii("body-" + id));
            byte[] reply = m2.recv(0);
            if (reply == null || m2.hasReceiveMore() || !str(reply).equals(id)) {
                fail(3, "mode-2 reply for " + id + ": " + (reply == null ? "timeout" : str(reply)));
            }
        }
        m2.close();

        fetcher.awaitCount(9);
        fetcher.reader.close();
        System.out.println("DONE " + fetcher.count);
        System.out.flush();
        ctx.term();
    }
}
