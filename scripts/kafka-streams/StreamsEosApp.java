// A small Kafka Streams 3.9 application with processing.guarantee=exactly_once_v2, run by
// crates/krust/tests/streams_eos.rs against krust and against Apache Kafka 3.9.
//
// It keeps, per key of the input topic, a running "count:sum:last" of the numeric values seen
// (a RocksDB store backed by a compacted changelog topic) and writes every update to the output
// topic (the record cache is off, so one output record per input record). Run exactly once,
// the output for a key holding values v1, v2, ... is "1:v1:v1", "2:v1+v2:v2", ...: any record
// processed twice or lost shows in the counts and sums.
//
// Usage: StreamsEosApp <bootstrap> <application.id> <input topic> <output topic> <state dir>
// Prints "STATE <old> -> <new>" on state changes and "PROCESSED <n>" every 500 aggregations;
// closes on SIGTERM.

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

public final class StreamsEosApp {
    private StreamsEosApp() {}

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 5) {
            System.err.println(
                "usage: StreamsEosApp <bootstrap> <application.id> <input> <output> <state dir>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        AtomicLong processed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
            .groupByKey()
            .aggregate(
                () -> "0:0:-",
                (key, value, total) -> {
                    String[] parts = total.split(":");
                    long count = Long.parseLong(parts[0]) + 1;
                    long sum = Long.parseLong(parts[1]) + Long.parseLong(value);
                    long n = processed.incrementAndGet();
                    if (n % 500 == 0) {
                        System.out.println("PROCESSED " + n);
                    }
                    return count + ":" + sum + ":" + value;
                },
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("running-totals")
                    .withKeySerde(Serdes.String())
                    .withValueSerde(Serdes.String()))
            .toStream()
            .to(args[3], Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> System.out.println("STATE " + before + " -> " + now));
        streams.setUncaughtExceptionHandler(error -> {
            System.out.println("UNCAUGHT " + error);
            return StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.out.println("CLOSED");
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }
}
