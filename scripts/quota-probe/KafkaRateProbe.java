// Prints Kafka 3.9's own quota arithmetic for the sequence pinned by
// crates/krust-metrics/src/quota.rs (`a_consumer_like_sequence_throttles_exactly_as_kafkas_sensor`):
// a Sensor with `new Rate()` over 11 samples of 1 s and an upper-bound quota of 262144, recorded
// at explicit times, `QuotaUtils.throttleTime` on each violation, the value then un-recorded.
//
//   java -cp "$HOME/.cache/krust/kafka-3.9.1/libs/*" scripts/quota-probe/KafkaRateProbe.java
//
// Output: one line per recording, "<ms since start> <throttle ms>".
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.metrics.*;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.utils.Time;

public class KafkaRateProbe {
    public static void main(String[] args) {
        Time time = Time.SYSTEM;
        Metrics metrics = new Metrics(new MetricConfig(), Collections.emptyList(), time);
        double bound = 262144.0;
        MetricConfig cfg = new MetricConfig().timeWindow(1, TimeUnit.SECONDS).samples(11).quota(Quota.upperBound(bound));
        Sensor s = metrics.sensor("q");
        s.add(metrics.metricName("byte-rate", "Fetch"), new Rate(), cfg);
        // (time ms, value, check): a consumer-like pattern: two ~1 MB fetches, a throttled
        // one taken back, retries after each throttle, a sample expiring.
        long[] t = {0, 1000, 1100, 1200, 2634, 3631, 4630, 11000, 12050, 12100, 12200, 13500, 14000, 23000};
        double[] v = {100, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000, 1000000};
        long start = 1_000_000_000L;
        for (int i = 0; i < t.length; i++) {
            long now = start + t[i];
            long throttle = 0;
            try {
                s.record(v[i], now, true);
            } catch (QuotaViolationException e) {
                throttle = kafka.utils.QuotaUtils.throttleTime(e, now);
                s.record(-v[i], now, false); // un-record, as a throttled fetch
            }
            System.out.println(t[i] + " " + throttle);
        }
    }
}
