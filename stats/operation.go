package stats

// Operation is the GenAI operation of a request a front end observed, from
// its endpoint: gen_ai.operation.name of the GenAI metrics. The zero value
// is the operation the Recorder was configured with (instrument.WithGenAI).
type Operation uint8

const (
	// OperationDefault: the Recorder's configured operation.
	OperationDefault Operation = iota
	// OperationChat: a chat completion (/v1/chat/completions).
	OperationChat
	// OperationTextCompletion: a completion (/v1/completions).
	OperationTextCompletion
	numOperations
)

// NumOperations is the number of Operation values, OperationDefault
// included: an array indexed by a valid Operation has this length.
const NumOperations = int(numOperations)

var operationNames = [numOperations]string{"", "chat", "text_completion"}

// Operations returns every Operation, OperationDefault first.
func Operations() []Operation {
	return []Operation{OperationDefault, OperationChat, OperationTextCompletion}
}

// String returns the gen_ai.operation.name value: "chat",
// "text_completion", or "" for OperationDefault (the Recorder's own).
func (o Operation) String() string {
	if o < numOperations {
		return operationNames[o]
	}
	return "unknown"
}

// Validate reports ErrUnknownOperation for a value not in Operations().
func (o Operation) Validate() error {
	if o >= numOperations {
		return fieldErr("Operation", uint8(o), ErrUnknownOperation)
	}
	return nil
}
