/* The 2.15.0 S3SinkTask's loop: put() groups records by the file-name template, flush() writes
 * each group as one object through commons' OutputWriter and uploads it. */
package topicvault.harness;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

import com.amazonaws.auth.AWSStaticCredentialsProvider;
import com.amazonaws.auth.BasicAWSCredentials;
import com.amazonaws.client.builder.AwsClientBuilder.EndpointConfiguration;
import com.amazonaws.services.s3.AmazonS3;
import com.amazonaws.services.s3.AmazonS3ClientBuilder;
import com.amazonaws.services.s3.model.ObjectMetadata;

import io.aiven.kafka.connect.common.grouper.RecordGrouper;
import io.aiven.kafka.connect.common.grouper.RecordGrouperFactory;
import io.aiven.kafka.connect.common.output.OutputWriter;

public final class AivenS3SinkTask extends SinkTask {
    private AivenS3SinkConfig config;
    private RecordGrouper grouper;
    private AmazonS3 s3;

    @Override
    public String version() {
        return "2.15.0-harness";
    }

    @Override
    public void start(final Map<String, String> props) {
        config = new AivenS3SinkConfig(props);
        final var credentials = new BasicAWSCredentials(
            config.getPassword(AivenS3SinkConfig.ACCESS_KEY_ID).value(),
            config.getPassword(AivenS3SinkConfig.SECRET_ACCESS_KEY).value());
        final var builder = AmazonS3ClientBuilder.standard()
            .withCredentials(new AWSStaticCredentialsProvider(credentials));
        final String endpoint = config.getString(AivenS3SinkConfig.ENDPOINT);
        final String region = config.getString(AivenS3SinkConfig.REGION);
        s3 = (endpoint == null ? builder.withRegion(region)
            : builder.withEndpointConfiguration(new EndpointConfiguration(endpoint, region)).withPathStyleAccessEnabled(true))
            .build();
        try {
            grouper = RecordGrouperFactory.newRecordGrouper(config);
        } catch (final Exception e) {
            throw new ConnectException("Unsupported file name template " + config.getFilename(), e);
        }
        if (config.getKafkaRetryBackoffMs() != null) {
            context.timeout(config.getKafkaRetryBackoffMs());
        }
    }

    @Override
    public void put(final Collection<SinkRecord> records) {
        records.forEach(grouper::put);
    }

    @Override
    public void flush(final Map<TopicPartition, OffsetAndMetadata> offsets) {
        final boolean wrote = grouper.records().values().stream().anyMatch(records -> !records.isEmpty());
        try {
            grouper.records().forEach(this::writeObject);
        } finally {
            grouper.clear();
        }
        final String hold = config.getString(AivenS3SinkConfig.HOLD_AFTER_FLUSH_FILE);
        while (wrote && !hold.isEmpty() && Files.exists(Path.of(hold))) {
            try {
                Thread.sleep(100);
            } catch (final InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    private void writeObject(final String filename, final List<SinkRecord> records) {
        if (records.isEmpty()) {
            return;
        }
        final var bytes = new ByteArrayOutputStream();
        try (var writer = OutputWriter.builder()
                .withCompressionType(config.getCompressionType())
                .withExternalProperties(config.originalsStrings())
                .withOutputFields(config.getOutputFields())
                .withEnvelopeEnabled(config.envelopeEnabled())
                .build(bytes, config.getFormatType())) {
            writer.writeRecords(records);
        } catch (final IOException e) {
            throw new ConnectException(e);
        }
        final var metadata = new ObjectMetadata();
        metadata.setContentLength(bytes.size());
        s3.putObject(config.getString(AivenS3SinkConfig.BUCKET), filename,
            new ByteArrayInputStream(bytes.toByteArray()), metadata);
    }

    @Override
    public void stop() {
        if (s3 != null) {
            s3.shutdown();
        }
    }
}
