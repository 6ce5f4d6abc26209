/*
 * `thrust bench --client java`: the official Java client (org.apache.rocketmq:rocketmq-client-java 5.x),
 * driven through its public API only, as in apache/rocketmq-clients
 * java/client/src/main/java/org/apache/rocketmq/client/java/example (PushConsumerExample,
 * AsyncProducerExample).
 *
 * Arguments are key=value pairs: mode (consume | produce), endpoints, and
 * - consume: group, topics (comma-separated), threads, warmup (s), window (s), first_timeout (s);
 * - produce: topic, size (bytes), in_flight, warmup (s), window (s);
 * - record: group, topics, threads: a push consumer that prints each message it consumes as an `m` line
 *   (`pid`, the body up to its first '|', as thrust.reliability.history's payload ids; `id`; `attempt`) and
 *   returns SUCCESS, until its standard input closes; then it closes the consumer and prints `closed`.
 *   The reliability suite uses it to put the Java client through the same fault as thrust.
 *
 * It prints JSON lines on stdout, the shape src/thrust/bench/official_driver.py prints: `started`,
 * `window_start` and `window_end`, each with `cpu`, this process's CPU seconds (every thread, the JIT and
 * the garbage collector included: OperatingSystemMXBean.getProcessCpuTime). Consume: `window_end` has
 * consumed, per_topic, peak (concurrent listener calls), total (consumed since the start). Produce: sent,
 * errors and the send -> receipt latency p50/p99 (ms) of the receipts inside the window. Then it halts
 * without closing the client (its shutdown is not measured).
 */
package thrust.bench;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class BenchDriver {
    private static final Object OUT = new Object();

    private BenchDriver() {
    }

    static void emit(String event, String fields) {
        synchronized (OUT) {
            System.out.println("{\"event\":\"" + event + "\"" + (fields.isEmpty() ? "" : "," + fields) + "}");
            System.out.flush();
        }
    }

    static double cpu() {
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime() / 1e9;
    }

    static void sleep(double seconds) throws InterruptedException {
        Thread.sleep((long) (seconds * 1000.0));
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> cfg = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            cfg.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(cfg.get("endpoints"))
            .enableSsl(false)
            .build();
        String mode = cfg.getOrDefault("mode", "consume");
        if ("produce".equals(mode)) {
            produce(cfg, config);
        } else if ("record".equals(mode)) {
            record(cfg, config);
        } else {
            consume(cfg, config);
        }
        Runtime.getRuntime().halt(0);
    }

    /** A push consumer of `group` subscribed to every tag of each of `topics`, with `threads` threads. */
    static PushConsumer pushConsumer(Map<String, String> cfg, ClientConfiguration config, MessageListener listener)
        throws Exception {
        Map<String, FilterExpression> subscriptions = new HashMap<>();
        for (String topic : cfg.get("topics").split(",")) {
            subscriptions.put(topic, new FilterExpression("*", FilterExpressionType.TAG));
        }
        return ClientServiceProvider.loadService().newPushConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(cfg.get("group"))
            .setSubscriptionExpressions(subscriptions)
            .setConsumptionThreadCount(Integer.parseInt(cfg.getOrDefault("threads", "20")))
            .setMessageListener(listener)
            .build();
    }

    static void consume(Map<String, String> cfg, ClientConfiguration config) throws Exception {
        String[] topics = cfg.get("topics").split(",");
        Map<String, AtomicLong> perTopic = new LinkedHashMap<>();
        for (String topic : topics) {
            perTopic.put(topic, new AtomicLong());
        }
        AtomicLong total = new AtomicLong();
        AtomicInteger running = new AtomicInteger();
        AtomicInteger peak = new AtomicInteger();
        PushConsumer consumer = pushConsumer(cfg, config, view -> {
            int now = running.incrementAndGet();
            peak.accumulateAndGet(now, Math::max);
            perTopic.get(view.getTopic()).incrementAndGet();
            total.incrementAndGet();
            running.decrementAndGet();
            return ConsumeResult.SUCCESS;
        });
        emit("started", "");
        long deadline = System.nanoTime() + (long) (Double.parseDouble(cfg.getOrDefault("first_timeout", "30")) * 1e9);
        while (total.get() == 0 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        sleep(Double.parseDouble(cfg.getOrDefault("warmup", "1")));
        peak.set(running.get());
        Map<String, Long> before = new HashMap<>();
        perTopic.forEach((t, n) -> before.put(t, n.get()));
        long n0 = total.get();
        double cpu0 = cpu();
        long t0 = System.nanoTime();
        emit("window_start", "\"consumed\":" + n0 + ",\"cpu\":" + cpu0);
        sleep(Double.parseDouble(cfg.getOrDefault("window", "10")));
        long n1 = total.get();
        double cpu1 = cpu();
        double seconds = (System.nanoTime() - t0) / 1e9;
        StringBuilder per = new StringBuilder("{");
        for (Map.Entry<String, AtomicLong> e : perTopic.entrySet()) {
            if (per.length() > 1) {
                per.append(',');
            }
            per.append('"').append(e.getKey()).append("\":").append(e.getValue().get() - before.get(e.getKey()));
        }
        per.append('}');
        emit("window_end", "\"seconds\":" + seconds + ",\"consumed\":" + (n1 - n0) + ",\"per_topic\":" + per
            + ",\"peak\":" + peak.get() + ",\"cpu\":" + cpu1 + ",\"total\":" + n1 + ",\"timer_p99_ms\":null");
    }

    static String payloadId(ByteBuffer body) {
        StringBuilder pid = new StringBuilder();
        for (int i = body.position(); i < body.limit() && pid.length() < 64; i++) {
            byte b = body.get(i);
            if (b == '|') {
                break;
            }
            pid.append((char) b);
        }
        return pid.toString();
    }

    static void record(Map<String, String> cfg, ClientConfiguration config) throws Exception {
        PushConsumer consumer = pushConsumer(cfg, config, view -> {
            emit("m", "\"pid\":\"" + payloadId(view.getBody()) + "\",\"id\":\"" + view.getMessageId()
                + "\",\"attempt\":" + view.getDeliveryAttempt());
            return ConsumeResult.SUCCESS;
        });
        emit("started", "");
        while (System.in.read() != -1) {
            // The parent closes our standard input to stop us; what it writes is ignored.
        }
        consumer.close();
        emit("closed", "");
    }

    static void produce(Map<String, String> cfg, ClientConfiguration config) throws Exception {
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        String topic = cfg.get("topic");
        byte[] body = new byte[Integer.parseInt(cfg.getOrDefault("size", "64"))];
        Arrays.fill(body, (byte) 'x');
        Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build();
        emit("started", "");
        Semaphore slots = new Semaphore(Integer.parseInt(cfg.getOrDefault("in_flight", "128")));
        // send -> receipt of each receipt inside the window, in microseconds (the window's share only)
        long[] latencies = new long[4_000_000];
        AtomicInteger samples = new AtomicInteger();
        AtomicLong sent = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicBoolean measuring = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        Thread sender = new Thread(() -> {
            while (!stop.get()) {
                try {
                    slots.acquire();
                } catch (InterruptedException e) {
                    return;
                }
                Message message = provider.newMessageBuilder().setTopic(topic).setBody(body).build();
                long start = System.nanoTime();
                producer.sendAsync(message).whenComplete((receipt, error) -> {
                    slots.release();
                    if (!measuring.get()) {
                        return;
                    }
                    if (error != null) {
                        errors.incrementAndGet();
                        return;
                    }
                    sent.incrementAndGet();
                    int i = samples.getAndIncrement();
                    if (i < latencies.length) {
                        latencies[i] = (System.nanoTime() - start) / 1000;
                    }
                });
            }
        }, "bench-sender");
        sender.setDaemon(true);
        sender.start();
        sleep(Double.parseDouble(cfg.getOrDefault("warmup", "1")));
        double cpu0 = cpu();
        emit("window_start", "\"cpu\":" + cpu0);
        long t0 = System.nanoTime();
        measuring.set(true);
        sleep(Double.parseDouble(cfg.getOrDefault("window", "10")));
        measuring.set(false);
        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpu1 = cpu();
        stop.set(true);
        int n = Math.min(samples.get(), latencies.length);
        long[] sorted = Arrays.copyOf(latencies, n);
        Arrays.sort(sorted);
        String p50 = n == 0 ? "null" : Double.toString(sorted[Math.min(n - 1, n / 2)] / 1000.0);
        String p99 = n == 0 ? "null" : Double.toString(sorted[Math.min(n - 1, (int) (n * 0.99))] / 1000.0);
        emit("window_end", "\"seconds\":" + seconds + ",\"sent\":" + sent.get() + ",\"errors\":" + errors.get()
            + ",\"p50_ms\":" + p50 + ",\"p99_ms\":" + p99 + ",\"cpu\":" + cpu1);
    }
}
