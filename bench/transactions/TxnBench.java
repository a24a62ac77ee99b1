// The client side of the `transactions` benchmark (bench/transactions/main.rs), run with Kafka
// 3.9's client jars against krust and against Apache Kafka 3.9 alike.
//
// A consume-transform-produce loop: `copiers` threads, each a read_committed consumer of the
// input topic (one group) and a transactional producer, copy records to the output topic in
// transactions of `txn-records` records, each transaction also carrying the consumer's offsets
// (sendOffsetsToTransaction with the group's metadata). Values carry the System.nanoTime() at
// which the feeder sent them (one JVM, so the clock is shared); a read_committed consumer of the
// output topic measures end to end latency.
//
//   TxnBench throughput <bootstrap> <input> <output> <copiers> <txn-records> <record-bytes>
//                       <warmup-records> <records>
//     Writes warmup+records input records first, then copies them: prints the transactions and
//     records committed per second after the warm-up, and checks the output holds every record.
//   TxnBench latency <bootstrap> <input> <output> <copiers> <txn-records> <record-bytes>
//                    <rate> <warmup-seconds> <seconds>
//     Feeds `rate` records/s for warmup+seconds while copying; prints the end to end latency
//     percentiles (feeder send to read_committed delivery) of the records sent after the warm-up.
//
// Output: one line "RESULT key=value ...", progress on stderr.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnBench {
    private TxnBench() {}

    static String bootstrap;
    static String input;
    static String output;
    static String group;

    public static void main(String[] args) throws Exception {
        if (args.length != (args.length > 0 && args[0].equals("latency") ? 10 : 9)) {
            System.err.println("usage: see the comment at the top of TxnBench.java");
            System.exit(2);
        }
        String mode = args[0];
        bootstrap = args[1];
        input = args[2];
        output = args[3];
        group = "txn-bench-" + input;
        int copiers = Integer.parseInt(args[4]);
        int txnRecords = Integer.parseInt(args[5]);
        int recordBytes = Integer.parseInt(args[6]);
        if (mode.equals("throughput")) {
            throughput(copiers, txnRecords, recordBytes, Long.parseLong(args[7]), Long.parseLong(args[8]));
        } else if (mode.equals("latency")) {
            latency(copiers, txnRecords, recordBytes, Long.parseLong(args[7]), Long.parseLong(args[8]),
                Long.parseLong(args[9]));
        } else {
            System.err.println("unknown mode " + mode);
            System.exit(2);
        }
    }

    static KafkaProducer<byte[], byte[]> producer(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String groupId, int maxPoll) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(maxPoll));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static byte[] value(int bytes, long sentNanos, long seq) {
        byte[] v = new byte[Math.max(bytes, 16)];
        for (int i = 0; i < 8; i++) {
            v[i] = (byte) (sentNanos >>> (56 - 8 * i));
            v[8 + i] = (byte) (seq >>> (56 - 8 * i));
        }
        return v;
    }

    static long sequence(byte[] v) {
        long n = 0;
        for (int i = 8; i < 16; i++) {
            n = (n << 8) | (v[i] & 0xff);
        }
        return n;
    }

    static long sentNanos(byte[] v) {
        long n = 0;
        for (int i = 0; i < 8; i++) {
            n = (n << 8) | (v[i] & 0xff);
        }
        return n;
    }

    /// One copier: consume, copy in transactions of txnRecords (a partial one after idleMs
    /// without records), commit the offsets with each.
    static final class Copier implements Runnable {
        final int index;
        final int txnRecords;
        final AtomicLong copied;
        final AtomicLong transactions;
        final AtomicBoolean stop;
        volatile Throwable failure;

        Copier(int index, int txnRecords, AtomicLong copied, AtomicLong transactions, AtomicBoolean stop) {
            this.index = index;
            this.txnRecords = txnRecords;
            this.copied = copied;
            this.transactions = transactions;
            this.stop = stop;
        }

        @Override
        public void run() {
            try (KafkaConsumer<byte[], byte[]> consumer = consumer(group, txnRecords);
                 KafkaProducer<byte[], byte[]> producer = producer(group + "-copier-" + index)) {
                producer.initTransactions();
                List<ConsumerRecord<byte[], byte[]>> pending = new ArrayList<>();
                // Records polled from a partition this copier loses, not yet in a transaction,
                // are the new owner's to copy (from the committed offset): drop them, or they
                // would be copied twice.
                consumer.subscribe(Collections.singletonList(input), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        pending.removeIf(r -> partitions.contains(new TopicPartition(r.topic(), r.partition())));
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> partitions) {
                        onPartitionsRevoked(partitions);
                    }
                });
                long firstPendingAt = 0;
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(20));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        if (pending.isEmpty()) {
                            firstPendingAt = System.nanoTime();
                        }
                        pending.add(r);
                    }
                    boolean full = pending.size() >= txnRecords;
                    boolean idle = !pending.isEmpty() && records.isEmpty()
                        && System.nanoTime() - firstPendingAt > 100_000_000L;
                    if (!full && !idle) {
                        continue;
                    }
                    int n = Math.min(pending.size(), txnRecords);
                    List<ConsumerRecord<byte[], byte[]>> batch = pending.subList(0, n);
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        producer.send(new ProducerRecord<>(output, r.key(), r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                            new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    batch.clear();
                    firstPendingAt = System.nanoTime();
                    copied.addAndGet(n);
                    transactions.incrementAndGet();
                }
            } catch (Throwable t) {
                failure = t;
                stop.set(true);
            }
        }
    }

    static List<Copier> startCopiers(int copiers, int txnRecords, AtomicLong copied, AtomicLong transactions,
                                     AtomicBoolean stop, List<Thread> threads) {
        List<Copier> list = new ArrayList<>();
        for (int i = 0; i < copiers; i++) {
            Copier c = new Copier(i, txnRecords, copied, transactions, stop);
            Thread t = new Thread(c, "copier-" + i);
            t.start();
            list.add(c);
            threads.add(t);
        }
        return list;
    }

    static void checkCopiers(List<Copier> copiers) {
        for (Copier c : copiers) {
            if (c.failure != null) {
                System.err.println("copier " + c.index + " failed: " + c.failure);
                c.failure.printStackTrace();
                System.exit(1);
            }
        }
    }

    static void throughput(int copiers, int txnRecords, int recordBytes, long warmup, long records)
            throws Exception {
        long total = warmup + records;
        try (KafkaProducer<byte[], byte[]> feeder = producer(null)) {
            for (long i = 0; i < total; i++) {
                feeder.send(new ProducerRecord<>(input, value(recordBytes, 0, i)));
            }
            feeder.flush();
        }
        System.err.println("input written: " + total);
        AtomicLong copied = new AtomicLong();
        AtomicLong transactions = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        List<Copier> list = startCopiers(copiers, txnRecords, copied, transactions, stop, threads);
        long deadline = System.nanoTime() + Duration.ofMinutes(15).toNanos();
        while (copied.get() < warmup && System.nanoTime() < deadline) {
            checkCopiers(list);
            Thread.sleep(1);
        }
        long startRecords = copied.get();
        long startTxns = transactions.get();
        long start = System.nanoTime();
        while (copied.get() < total && System.nanoTime() < deadline) {
            checkCopiers(list);
            Thread.sleep(1);
        }
        long end = System.nanoTime();
        long doneRecords = copied.get() - startRecords;
        long doneTxns = transactions.get() - startTxns;
        stop.set(true);
        for (Thread t : threads) {
            t.join();
        }
        checkCopiers(list);
        if (copied.get() != total) {
            System.err.println("copied " + copied.get() + " of " + total + " before the deadline");
            System.exit(1);
        }
        // Exactly once: the output holds every input record once.
        long[] seen = new long[(int) total];
        long read = 0;
        try (KafkaConsumer<byte[], byte[]> check = consumer(group + "-check", 10_000)) {
            check.subscribe(Collections.singletonList(output));
            long checkDeadline = System.nanoTime() + Duration.ofMinutes(5).toNanos();
            while (read < total && System.nanoTime() < checkDeadline) {
                for (ConsumerRecord<byte[], byte[]> r : check.poll(Duration.ofMillis(200))) {
                    seen[(int) sequence(r.value())]++;
                    read++;
                }
            }
        }
        long wrong = Arrays.stream(seen).filter(n -> n != 1).count();
        double seconds = (end - start) / 1e9;
        System.out.printf("RESULT seconds=%.3f transactions=%d records=%d txn_per_s=%.1f records_per_s=%.1f "
                + "output_records=%d not_exactly_once=%d%n",
            seconds, doneTxns, doneRecords, doneTxns / seconds, doneRecords / seconds, read, wrong);
    }

    static void latency(int copiers, int txnRecords, int recordBytes, long rate, long warmupSeconds, long seconds)
            throws Exception {
        AtomicLong copied = new AtomicLong();
        AtomicLong transactions = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        List<Copier> list = startCopiers(copiers, txnRecords, copied, transactions, stop, threads);
        // The end consumer: collects latencies of records sent after the warm-up.
        long measureFrom = System.nanoTime() + Duration.ofSeconds(warmupSeconds).toNanos();
        long feedUntil = measureFrom + Duration.ofSeconds(seconds).toNanos();
        long expected = rate * seconds;
        long[] latencies = new long[(int) (expected + rate)];
        AtomicLong measured = new AtomicLong();
        AtomicLong duplicates = new AtomicLong();
        BitSet delivered = new BitSet();
        AtomicBoolean feederDone = new AtomicBoolean();
        Thread end = new Thread(() -> {
            try (KafkaConsumer<byte[], byte[]> c = consumer(group + "-end", 10_000)) {
                c.subscribe(Collections.singletonList(output));
                long quietSince = 0;
                while (true) {
                    ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(5));
                    long now = System.nanoTime();
                    for (ConsumerRecord<byte[], byte[]> r : rs) {
                        long sent = sentNanos(r.value());
                        int seq = (int) sequence(r.value());
                        if (delivered.get(seq)) {
                            duplicates.incrementAndGet();
                            continue;
                        }
                        delivered.set(seq);
                        if (sent >= measureFrom && sent < feedUntil) {
                            int i = (int) measured.getAndIncrement();
                            if (i < latencies.length) {
                                latencies[i] = now - sent;
                            }
                        }
                    }
                    if (feederDone.get()) {
                        if (!rs.isEmpty()) {
                            quietSince = now;
                        } else if (quietSince == 0) {
                            quietSince = now;
                        } else if (now - quietSince > 5_000_000_000L || measured.get() >= expected) {
                            break;
                        }
                    }
                }
            }
        }, "end-consumer");
        end.start();
        long sentMeasured = 0;
        try (KafkaProducer<byte[], byte[]> feeder = producer(null)) {
            long start = System.nanoTime();
            long seq = 0;
            long intervalNanos = 1_000_000_000L / rate;
            while (true) {
                long due = start + seq * intervalNanos;
                long now = System.nanoTime();
                if (due >= feedUntil) {
                    break;
                }
                if (now < due) {
                    long sleep = due - now;
                    if (sleep > 200_000) {
                        Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
                    }
                    continue;
                }
                checkCopiers(list);
                // Stamped with the time it was due: a feeder that falls behind counts against
                // the system (no coordinated omission).
                feeder.send(new ProducerRecord<>(input, value(recordBytes, due, seq)));
                if (due >= measureFrom) {
                    sentMeasured++;
                }
                seq++;
            }
            feeder.flush();
        }
        feederDone.set(true);
        end.join();
        stop.set(true);
        for (Thread t : threads) {
            t.join();
        }
        checkCopiers(list);
        int n = (int) Math.min(measured.get(), latencies.length);
        long[] sorted = Arrays.copyOf(latencies, n);
        Arrays.sort(sorted);
        System.out.printf("RESULT rate=%d sent=%d delivered=%d duplicates=%d p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f "
                + "max_ms=%.2f transactions=%d%n",
            rate, sentMeasured, n, duplicates.get(), pct(sorted, 0.50), pct(sorted, 0.99), pct(sorted, 0.999),
            n == 0 ? Double.NaN : sorted[n - 1] / 1e6, transactions.get());
    }

    static double pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1);
        return sorted[Math.max(i, 0)] / 1e6;
    }
}
