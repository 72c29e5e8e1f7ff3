// A Dapr JavaScript SDK app (DaprServer): subscribes to "orders" and, for each order, publishes
// a shipment with the server's own DaprClient, which it receives on "shipments" too.
// Usage: node subscriber.js http|grpc   (APP_PORT, DAPR_HTTP_PORT, DAPR_GRPC_PORT from the env)
const { CommunicationProtocolEnum, DaprServer } = require("@dapr/dapr");

const grpc = process.argv[2] === "grpc";
const protocol = grpc ? CommunicationProtocolEnum.GRPC : CommunicationProtocolEnum.HTTP;

async function main() {
  const server = new DaprServer({
    serverHost: "127.0.0.1",
    serverPort: process.env.APP_PORT,
    communicationProtocol: protocol,
    clientOptions: {
      daprHost: "127.0.0.1",
      daprPort: grpc ? process.env.DAPR_GRPC_PORT : process.env.DAPR_HTTP_PORT,
      communicationProtocol: protocol,
    },
  });
  await server.pubsub.subscribe("orderpubsub", "orders", async (order) => {
    console.log(`received order ${order.orderId}`);
    await server.client.pubsub.publish("orderpubsub", "shipments", { orderId: order.orderId });
  });
  await server.pubsub.subscribe("orderpubsub", "shipments", async (shipment) => {
    console.log(`received shipment ${shipment.orderId}`);
  });
  await server.start();
  console.log("subscriber started");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
