// The official batch-settlement client's own view of a channel (npm @x402/evm 2.27): reads a
// ChannelConfig and a payer key as JSON from argv[2], prints the channel id the client computes,
// a voucher it signs and the deposit payload it builds (ERC-3009 to the collector, with its first
// voucher), so a test can hold paygate's EIP-712 hashing, payload parsing and the contract against
// them: node x402_channel_facts.cjs
//   '{"config":{...},"chainId":84532,"key":"0x..","max":"123","deposit":"1000","asset":{...}}'
"use strict";
const {
  computeChannelId,
  signVoucher,
  createBatchSettlementEIP3009DepositPayload,
} = require("@x402/evm/batch-settlement/client");
const { privateKeyToAccount } = require("viem/accounts");

async function main() {
  const input = JSON.parse(process.argv[2]);
  const account = privateKeyToAccount(input.key);
  const network = `eip155:${input.chainId}`;
  const channelId = computeChannelId(input.config, network);
  const voucher = await signVoucher(account, channelId, input.max, network);
  const requirements = {
    scheme: "batch-settlement",
    network,
    amount: input.max,
    asset: input.config.token,
    payTo: input.config.receiver,
    maxTimeoutSeconds: 300,
    extra: {
      name: input.asset.name,
      version: input.asset.version,
      receiverAuthorizer: input.config.receiverAuthorizer,
      withdrawDelay: input.config.withdrawDelay,
    },
  };
  const deposit = await createBatchSettlementEIP3009DepositPayload(
    account,
    2,
    requirements,
    input.config,
    input.deposit,
    input.max,
  );
  process.stdout.write(JSON.stringify({ channelId, voucher, deposit: deposit.payload }) + "\n");
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
