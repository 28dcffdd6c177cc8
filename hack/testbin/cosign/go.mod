module tkm.local/testbin/cosign

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1 // indirect
	github.com/sigstore/cosign/v2 v2.6.5 // indirect
)
