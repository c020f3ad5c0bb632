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
	// OperationEmbeddings: an embeddings request (/v1/embeddings), with a
	// prompt and no generation.
	OperationEmbeddings
	// OperationPooling: a request to one of vLLM's other pooling endpoints
	// (/pooling, /classify, /score, /rerank), with a prompt and no
	// generation. "pooling" is not a GenAI conventions value: the
	// conventions define none for these operations.
	OperationPooling
	numOperations
)

// NumOperations is the number of Operation values, OperationDefault
// included: an array indexed by a valid Operation has this length.
const NumOperations = int(numOperations)

var operationNames = [numOperations]string{"", "chat", "text_completion", "embeddings", "pooling"}

// Operations returns every Operation, OperationDefault first.
func Operations() []Operation {
	return []Operation{OperationDefault, OperationChat, OperationTextCompletion, OperationEmbeddings, OperationPooling}
}

// String returns the gen_ai.operation.name value: "chat",
// "text_completion", "embeddings", "pooling", or "" for OperationDefault
// (the Recorder's own).
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

// Generates reports an operation that generates output tokens: not
// embeddings or pooling, whose responses have a prompt only.
func (o Operation) Generates() bool { return o != OperationEmbeddings && o != OperationPooling }
