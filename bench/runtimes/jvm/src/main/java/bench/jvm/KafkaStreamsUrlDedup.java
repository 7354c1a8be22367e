package bench.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The URL dedup as a Kafka shop would write it on Kafka Streams: frontier records (JSON,
 * schemas/frontier_url.schema.json) canonicalized ({@link UrlCanon}) and re-keyed by host through
 * an internal repartition topic ({@code <app-id>-by-host-repartition}); then a Processor API
 * processor over a persistent (RocksDB) KeyValueStore of 128-bit URL fingerprints, changelogged,
 * forwards each URL the first time its fingerprint is seen. processing.guarantee=exactly_once_v2;
 * everything else Kafka Streams' defaults (one stream thread, commit.interval.ms 100 under EOS, no
 * static membership, no standby replicas).
 *
 * <pre>java -cp target/runtime-bench.jar:target/lib/* bench.jvm.KafkaStreamsUrlDedup \
 *     --bootstrap B --input FRONTIER --output NEW_URLS --app-id ID --state-dir DIR</pre>
 */
public final class KafkaStreamsUrlDedup {
    static final String STORE = "seen-urls";
    static final ObjectMapper JSON = new ObjectMapper();
    static final AtomicLong REFUSED = new AtomicLong();

    /** What travels on the repartition topic and to the output: the URL as found and its canonical form. */
    public record Discovered(String url, String canonical) {}

    static final class DiscoveredSerializer implements Serializer<Discovered> {
        @Override
        public byte[] serialize(String topic, Discovered value) {
            try {
                return value == null ? null : JSON.writeValueAsBytes(value);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    static final class DiscoveredDeserializer implements Deserializer<Discovered> {
        @Override
        public Discovered deserialize(String topic, byte[] data) {
            try {
                return data == null ? null : JSON.readValue(data, Discovered.class);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    /** A frontier record keyed by its canonical URL's host; none for a record that does not parse. */
    static List<KeyValue<String, Discovered>> byHost(byte[] key, byte[] value) {
        try {
            JsonNode record = JSON.readTree(value);
            JsonNode url = record.get("url");
            JsonNode base = record.get("source_url");
            if (url != null && url.isTextual()) {
                UrlCanon.Canonical canonical = UrlCanon.canonicalize(
                        url.asText(), base != null && base.isTextual() ? base.asText() : null);
                if (canonical != null) {
                    return List.of(KeyValue.pair(canonical.host(), new Discovered(url.asText(), canonical.url())));
                }
            }
        } catch (IOException | RuntimeException e) {
            // refused below
        }
        REFUSED.incrementAndGet();
        return List.of();
    }

    /** Forwards a URL the first time its fingerprint is seen; the store keeps when that was. */
    static final class SeenFilter implements Processor<String, Discovered, String, Discovered> {
        private ProcessorContext<String, Discovered> context;
        private KeyValueStore<Bytes, Long> seen;

        @Override
        public void init(ProcessorContext<String, Discovered> context) {
            this.context = context;
            this.seen = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, Discovered> record) {
            Bytes fingerprint = Bytes.wrap(UrlCanon.fingerprint(record.value().canonical()));
            if (seen.get(fingerprint) == null) {
                seen.put(fingerprint, record.timestamp());
                context.forward(record);
            }
        }
    }

    public static void main(String[] argv) throws InterruptedException {
        Args args = new Args(argv);
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap", "127.0.0.1:19092"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        Serde<Discovered> discovered = Serdes.serdeFrom(new DiscoveredSerializer(), new DiscoveredDeserializer());

        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(STORE), Serdes.Bytes(), Serdes.Long()));
        builder.stream(args.get("input"), Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .flatMap(KafkaStreamsUrlDedup::byHost, Named.as("canonicalize"))
                .repartition(Repartitioned.with(Serdes.String(), discovered).withName("by-host"))
                .process(SeenFilter::new, Named.as("seen-filter"), STORE)
                .to(args.get("output"), Produced.with(Serdes.String(), discovered));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        // A client that failed for good exits, so the harness (a supervisor) restarts it.
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.ERROR) {
                System.err.println("kafka streams: ERROR state, exiting");
                Runtime.getRuntime().halt(1);
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.err.println("kafka streams: closed; refused records " + REFUSED.get());
        }));
        streams.start();
        Thread.currentThread().join();
    }
}
