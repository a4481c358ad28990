package anyresource

// carriesType tells whether the JSON object raw has both apiVersion and
// kind among its top-level keys, found by scanning the keys (not by where
// they lie: a custom resource's keys are sorted, so additionalInfo, Zone
// or _x come before apiVersion). A key written with escapes is not
// recognized: the caller then re-encodes, which is correct, only slower.
// Malformed input reads as false.
func carriesType(raw []byte) bool {
	var apiVersion, kind bool
	depth := 0
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '{':
			depth++
			expectKey = depth == 1
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		case '"':
			end := i + 1
			for end < len(raw) && raw[end] != '"' {
				if raw[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(raw) {
				return false
			}
			if expectKey {
				switch string(raw[i+1 : end]) {
				case "apiVersion":
					apiVersion = true
				case "kind":
					kind = true
				}
				if apiVersion && kind {
					return true
				}
				expectKey = false
			}
			i = end
		}
	}
	return false
}
