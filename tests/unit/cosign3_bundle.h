/*
 * cosign3_bundle.h - one real cosign v3.1.3 keyed signature, shared by the
 * unit tests of the bundle check (test_bundle.c) and of the signature search
 * (test_sigfind.c, test_sigjob.c): a Sigstore bundle (DSSE, in-toto statement)
 * made by `cosign sign --key cosign.key --use-signing-config=false
 * --tlog-upload=false` for the image COSIGN3_IMG; COSIGN3_PUB verifies it.
 */
#ifndef TKM_TEST_COSIGN3_BUNDLE_H
#define TKM_TEST_COSIGN3_BUNDLE_H

#define COSIGN3_HEX "ca5028e4e017430615443cd0ec724e48340e283e2c8a7cbf98f83647ad38b440"
#define COSIGN3_IMG "sha256:" COSIGN3_HEX

static const char COSIGN3_PUB[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErG5Xnr3E4G9Pdatajn51qBRjWb/w\n"
    "js2xr881Xuy3PoD2Y9T75Ej3IlwlSP/XBm2eP90RakmH1cFF2mZ3HBBu+g==\n"
    "-----END PUBLIC KEY-----\n";

static const char COSIGN3_BUNDLE[] =
    "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\", "
    "\"verificationMaterial\":{\"publicKey\":{\"hint\":\"5j8EsdDcpAl9DFfV/"
    "a+wDwHXxvNNFhRlvBBAjZJSwH4="
    "\"}}, \"dsseEnvelope\":{\"payload\":"
    "\"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCAic3ViamVjdCI6W3siZGlnZXN0Ijp7InNo"
    "YTI1NiI6ImNhNTAyOGU0ZTAxNzQzMDYxNTQ0M2NkMGVjNzI0ZTQ4MzQwZTI4M2UyYzhhN2NiZjk4ZjgzNjQ3YWQzOGI0ND"
    "AifSwgImFubm90YXRpb25zIjp7fX1dLCAicHJlZGljYXRlVHlwZSI6Imh0dHBzOi8vc2lnc3RvcmUuZGV2L2Nvc2lnbi9z"
    "aWduL3YxIiwgInByZWRpY2F0ZSI6e319\", \"payloadType\":\"application/vnd.in-toto+json\", "
    "\"signatures\":[{\"sig\":\"MEQCIGFIslMzKL11nn1xQ0xpHIUMCLcByoiL3sr5SceoHqZTAiA0+"
    "eeqaAfb8EjPwPWQuGudSCyBc1UNO7tsrrvqvqZyzg==\"}]}}";

#endif
