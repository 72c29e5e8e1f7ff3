// A Dapr JavaScript SDK publisher (DaprClient): publishes orders 1..5 to "orders", then exits.
// Usage: node publisher.js http|grpc   (DAPR_HTTP_PORT, DAPR_GRPC_PORT from the env)
const { CommunicationProtocolEnum, DaprClient } = require("@dapr/dapr");

const grpc = process.argv[2] === "grpc";

async function main() {
  const client = new DaprClient({
    daprHost: "127.0.0.1",
    daprPort: grpc ? process.env.DAPR_GRPC_PORT : process.env.DAPR_HTTP_PORT,
    communicationProtocol: grpc ? CommunicationProtocolEnum.GRPC : CommunicationProtocolEnum.HTTP,
  });
  await client.start();
  for (let orderId = 1; orderId <= 5; orderId++) {
    const answer = await client.pubsub.publish("orderpubsub", "orders", { orderId });
    if (answer.error) {
      throw answer.error;
    }
    console.log(`published order ${orderId}`);
  }
  await client.stop();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
