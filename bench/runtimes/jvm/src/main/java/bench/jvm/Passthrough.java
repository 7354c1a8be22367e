package bench.jvm;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's limit on this broker: a plain KafkaConsumer -> KafkaProducer loop, no state, no
 * transactions (at least once: offsets committed asynchronously after each poll's records were
 * handed to the producer), the same loop as the Python baseline (bench/runtimes/passthrough.py):
 * up to 5,000 records a poll, 1 MB producer batches.
 *
 * <pre>java -cp target/runtime-bench.jar:target/lib/* bench.jvm.Passthrough \
 *     --bootstrap B --input IN --output OUT --group G</pre>
 */
public final class Passthrough {
    public static void main(String[] argv) throws InterruptedException {
        Args args = new Args(argv);
        String bootstrap = args.get("bootstrap", "127.0.0.1:19092");
        String output = args.get("output");
        Properties consumerProps = new Properties();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        Properties producerProps = new Properties();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        producerProps.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        producerProps.put(ProducerConfig.LINGER_MS_CONFIG, "5");

        KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer());
        CountDownLatch stopped = new CountDownLatch(1);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                stopped.await();
            } catch (InterruptedException e) {
                main.interrupt();
            }
        }));
        try {
            consumer.subscribe(List.of(args.get("input")));
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(250));
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), record.value()));
                }
                if (!records.isEmpty()) {
                    consumer.commitAsync();
                }
            }
        } catch (WakeupException e) {
            // SIGTERM
        } finally {
            producer.flush();
            producer.close();
            consumer.close();
            stopped.countDown();
        }
    }
}
