// The reference listener for the differential conformance suite: ARC 0.14.2's poll loop
// (github.com/actions/scaleset v0.4.0, the version ARC 0.14.2 requires) with a scaler that
// records its calls. Its own module so its pins move only when this file does.
module conformance/reference

go 1.25.3

require (
	github.com/actions/scaleset v0.4.0
	github.com/google/uuid v1.6.0
	golang.org/x/net v0.52.0
)

require (
	github.com/golang-jwt/jwt/v4 v4.5.2 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	golang.org/x/text v0.35.0 // indirect
)
