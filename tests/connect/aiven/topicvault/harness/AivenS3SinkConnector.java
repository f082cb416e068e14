/*
 * Aiven's S3 sink 2.15.0, driven from its own libraries in a real Kafka Connect worker.
 *
 * The connector's jar (io.aiven:s3-connector-for-apache-kafka) is not on Maven Central; the
 * libraries it bundles are (commons-for-apache-kafka-connect 0.12.0 writes every byte of every
 * object, aws-java-sdk-s3 1.12.542 uploads it). This connector, its task and its config do
 * what the 2.15.0 S3SinkConnector/S3SinkTask/S3SinkConfig do, under the same setting names and
 * defaults; nothing of Aiven's code is copied here. Built by ci/connect-jars.sh.
 */
package topicvault.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

public final class AivenS3SinkConnector extends SinkConnector {
    private Map<String, String> props;

    @Override
    public String version() {
        return "2.15.0-harness";
    }

    @Override
    public void start(final Map<String, String> props) {
        new AivenS3SinkConfig(props); // refuse a bad configuration at start, as the connector does
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return AivenS3SinkTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(final int maxTasks) {
        final List<Map<String, String>> configs = new ArrayList<>();
        for (int i = 0; i < maxTasks; i++) {
            configs.add(Map.copyOf(props));
        }
        return configs;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return AivenS3SinkConfig.configDef();
    }
}
