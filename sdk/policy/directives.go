package policy

import "github.com/kvpilot/kvpilot/sdk/directive"

// Directive is sdk/directive's Directive, re-exported so a policy's
// signatures read in one package. Build values with the directive package's
// types: directive.Splice{...}, directive.Cache{...}, and so on.
type Directive = directive.Directive
