// An independent JOSE implementation (npm `jose`) against paygate's JWE of CPN payout data.
// Input (argv[2], JSON): {pem: PKCS#8 private key, jwk: its public JWK, jwe: a compact JWE
// paygate made to that key, payload: text to encrypt}. Output (stdout, JSON): {opened: the
// JWE's plaintext and protected header as jose reads them, sealed: `payload` encrypted to the
// JWK with ECDH-ES+A128KW / A128GCM}.
'use strict';
const jose = require('jose');

async function main() {
  const input = JSON.parse(process.argv[2]);
  const privateKey = await jose.importPKCS8(input.pem, 'ECDH-ES+A128KW');
  const { plaintext, protectedHeader } = await jose.compactDecrypt(input.jwe, privateKey);
  const publicKey = await jose.importJWK(input.jwk, 'ECDH-ES+A128KW');
  const sealed = await new jose.CompactEncrypt(new TextEncoder().encode(input.payload))
    .setProtectedHeader({ alg: 'ECDH-ES+A128KW', enc: 'A128GCM', kid: input.jwk.kid })
    .encrypt(publicKey);
  process.stdout.write(JSON.stringify({
    opened: { plaintext: new TextDecoder().decode(plaintext), header: protectedHeader },
    sealed,
  }));
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
