// Prints Kafka 3.9's own token-bucket quota arithmetic (KIP-599, `controller_mutation_rate`) for
// the sequences pinned by crates/krust-metrics/src/quota.rs
// (`token_bucket_strict_and_permissive_as_kafkas_sensor`): a Sensor with `new TokenBucket()`
// over 11 samples of 1 s and an upper-bound quota of 2 (a burst of 22 tokens), recorded at
// explicit times.
//   strict     (CreateTopics v6+): `checkQuotas` first; a violation refuses the mutation;
//              otherwise `record(value, now, false)`.
//   permissive (older versions):   `record(value, now, true)`; a violation only throttles.
// The throttle is `ControllerMutationQuotaManager.throttleTimeMs`: round(-tokens / bound * 1000).
//
//   java -cp "$HOME/.cache/krust/kafka-3.9.1/libs/*" scripts/quota-probe/KafkaTokenBucketProbe.java
//
// Output: one line per recording, "<mode> <ms since start> <throttle ms> <tokens after>".
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.metrics.*;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.stats.TokenBucket;

public class KafkaTokenBucketProbe {
    public static void main(String[] args) {
        long[] t = {0, 100, 200, 300, 4000, 4100, 9000};
        double[] v = {10, 10, 10, 10, 10, 10, 3};
        for (String mode : new String[] {"strict", "permissive"}) {
            Metrics metrics = new Metrics(new MetricConfig(), Collections.emptyList(), org.apache.kafka.common.utils.Time.SYSTEM);
            MetricConfig cfg = new MetricConfig().timeWindow(1, TimeUnit.SECONDS).samples(11).quota(Quota.upperBound(2.0));
            Sensor s = metrics.sensor("q");
            MetricName name = metrics.metricName("tokens", "ControllerMutation");
            s.add(name, new TokenBucket(), cfg);
            KafkaMetric m = metrics.metric(name);
            long start = 1_000_000_000L;
            for (int i = 0; i < t.length; i++) {
                long now = start + t[i];
                long throttle = 0;
                try {
                    if (mode.equals("strict")) {
                        s.checkQuotas(now);
                        s.record(v[i], now, false);
                    } else {
                        s.record(v[i], now, true);
                    }
                } catch (QuotaViolationException e) {
                    throttle = Math.round(-e.value() / e.bound() * 1000);
                }
                System.out.println(mode + " " + t[i] + " " + throttle + " " + m.measurable().measure(cfg, now));
            }
        }
    }
}
